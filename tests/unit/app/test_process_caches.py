"""The app's process caches and a user's text (issue 26, item 11): the builtin model keeps no
question in its caches (the knowledge base's sentences only), and the channel's merge
indexes stay under their byte bound and are emptied by a deletion (``caches.forget``)."""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from tests.support.heap import holding
from tests.unit.app.test_builtin_model import SYSTEM_WITH_DOCS, ask
from threadkeeper.app import builtin_model, state
from threadkeeper.app.state import merge_messages
from threadkeeper.domain import caches


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
