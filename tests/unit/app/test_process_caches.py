"""The app's process caches and a user's text (issue 26, item 11): the builtin model keeps no
question in its caches (the knowledge base's sentences only), the channel's merge indexes
stay under their byte bound and are emptied by a deletion (``caches.forget``), and a run's
context, kept past the run, holds nothing of its messages."""

from __future__ import annotations

import contextvars
import uuid
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from pydantic import Field

from tests.support.heap import holding
from tests.support.scripted_model import ScriptedChatModel
from tests.unit.app.test_builtin_model import SYSTEM_WITH_DOCS, ask
from threadkeeper.adapters import atomic, builtin_model
from threadkeeper.adapters.knowledge import KnowledgeBase
from threadkeeper.app import state
from threadkeeper.app.agent import current_trace
from threadkeeper.app.config import Settings
from threadkeeper.app.container import build_service
from threadkeeper.app.service import Caller, RunMessage, RunRequest
from threadkeeper.app.state import merge_messages
from threadkeeper.conformance.in_memory import InMemoryBackend
from threadkeeper.domain import caches
from threadkeeper.domain.estimate import EstimatingCounter


async def test_the_builtin_model_keeps_no_question_in_its_caches() -> None:
    await ask([SYSTEM_WITH_DOCS, HumanMessage("Does dental cover pay for fillings?")])
    known = builtin_model._terms.cache_info().currsize
    marker = f"zq{uuid.uuid4().hex[:12]}"
    reply = await ask(
        [SYSTEM_WITH_DOCS, HumanMessage(f"I am {marker}: does dental cover pay for fillings?")]
    )
    assert reply.additional_kwargs["threadkeeper"]["status"] == "answered"  # as before
    assert builtin_model._terms.cache_info().currsize == known  # the documents' only
    del reply
    caches.forget(threads=["acme:u1:t1"])  # the estimates' memo held the message objects
    assert not holding(marker, besides=(marker,))


def test_the_merge_indexes_stay_under_their_byte_bound_and_forget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bound = 400_000
    monkeypatch.setattr(state, "KEPT_BYTES", bound)
    caches.forget()
    for thread in range(20):
        history: list[BaseMessage] = []
        for turn in range(4):  # a run's merges: the question, then the answer
            question = HumanMessage(uuid.uuid4().hex * 340, id=f"q{thread}-{turn}")
            history = merge_messages(history, [question])
            history = merge_messages(history, [AIMessage("ok", id=f"a{thread}-{turn}")])
        assert state._kept.size <= bound + 4 * 14_000
    assert len(state._INDEXES) < 20 * 8
    caches.forget(threads=["acme:u1:t1"])
    assert not state._INDEXES
    assert not state._BY_FIRST
    assert state._kept.size == 0


class ContextKeeping(ScriptedChatModel):
    """Keeps the context of each call, as a connection opened during a run does (its
    socket's reader callback holds the context it was opened in, as long as it lives)."""

    contexts: list[contextvars.Context] = Field(default_factory=list)

    def _generate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        self.contexts.append(contextvars.copy_context())
        return super()._generate(messages, *args, **kwargs)


async def test_a_context_kept_past_its_run_holds_none_of_its_messages() -> None:
    """The run's staged checkpoints and its trace are emptied when the run ends (a pooled
    Redis or MySQL connection opened during a run kept both: issue 26.11)."""
    model = ContextKeeping(default="Dental cover pays for fillings.")
    service = build_service(
        settings=Settings.of(profile="embedded", model_max_retries=0),
        backend=InMemoryBackend(),
        counter=EstimatingCounter(),
        knowledge=KnowledgeBase.from_directory(),
        model=model,
    )
    marker = f"zq{uuid.uuid4().hex[:12]}"
    handle = await service.start_run(
        Caller("acme", "u1"), "t1", RunRequest(RunMessage(f"I am {marker}: fillings?"))
    )
    await handle.result()
    await service.wait_idle()
    assert model.contexts
    for context in model.contexts:
        trace, staging = context.get(current_trace), context.get(atomic._current)
        assert trace is not None
        assert staging is not None
        assert not trace.windows
        assert not trace.system_prompts
        assert not staging.log
        assert not staging.checkpoints
        assert not staging.read
        assert marker not in repr(list(context.values()))
