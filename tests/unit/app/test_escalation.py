"""Escalation: who asks for a person (fa/zh/en), and the rule holding for every model.

The detector must tell a request ("talk to a human", «با اپراتور صحبت کنم», «转人工») from a
mention ("my insurance agent", "a tour operator", «真人寿险»). The rule — a request for a
person, or two clarifying replies in a row — is applied by the agent to any chat model, so a
real (non-builtin) model ends runs in ``escalate`` with ``handoff_context`` exactly as the
builtin model does; the agent tests run a ``ScriptedChatModel`` inside the real service.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from tests.support.scripted_model import ScriptedChatModel
from threadkeeper.adapters.builtin_model import BuiltinChatModel
from threadkeeper.adapters.embedded import open_embedded
from threadkeeper.adapters.knowledge import KnowledgeBase
from threadkeeper.app.agent import stamp_for
from threadkeeper.app.config import Settings
from threadkeeper.app.container import build_service
from threadkeeper.app.runs import RunService
from threadkeeper.app.service import Caller, RunMessage, RunRequest
from threadkeeper.domain.escalation import (
    CLARIFICATIONS_BEFORE_ESCALATION,
    HANDOFF_MESSAGES,
    METADATA_KEY,
    Language,
    asks_for_person,
    detect_language,
    escalation_due,
)
from threadkeeper.domain.estimate import EstimatingCounter

# ---------------------------------------------------------------------------------------------
# The detector

REQUESTS: dict[Language, list[str]] = {
    "en": [
        # the phrases the builtin model always escalated on
        "Can I talk to a human please?",
        "I want a real person",
        "Get me an agent",
        "let me speak to someone",
        "OPERATOR!",
        "I'd like a representative",
        "I want to talk to a human agent please",
        "Can I speak to a real person?",
        "I want to talk to a person",
        # more request forms
        "human please",
        "Real person please",
        "agent",
        "transfer me to an operator",
        "Connect me with a representative",
        "Can you put me through to a person?",
        "Is there a human I can talk to?",
        "Can I please talk to an actual human and not a bot? I've been on hold for an hour.",
        "I’d like to speak with a customer service representative",
        "I need a live agent",
    ],
    "fa": [
        "می‌خواهم با اپراتور صحبت کنم",
        "لطفا وصل کنید به کارشناس",
        "می‌شه با یک انسان حرف بزنم؟",
        "پشتیبان انسانی می‌خواهم",
        "می‌خواهم با یک کارشناس صحبت کنم",
        "منو به اپراتور وصل کنید",
        "اپراتور!",
        "می‌خوام با یه آدم واقعی حرف بزنم",
        "لطفاً با یک کارشناس بیمه صحبت کنم",
        "میشه با پشتیبانی تماس بگیرم؟",
        "یه کارشناس لازم دارم",
        "اپراتور می‌خوام",
    ],
    "zh": [
        "转人工",
        "我要人工客服",
        "能找真人吗？",
        "请帮我接人工服务",
        "我要转人工客服",
        "我要找真人",
        "找人工",
        "人工客服",
        "我想跟真人说话",
        "帮我转接人工客服",
        "我要联系客服",
        "能不能换个人工客服",
        "請幫我轉人工",
    ],
}

MENTIONS: list[str] = [
    # a person named, not asked for
    "Can my insurance agent file the claim?",
    "I work as a tour operator, does travel insurance cover me?",
    "Is a real person allowed to be a beneficiary?",
    "我想了解真人寿险",
    "The agent on the phone was really rude to me.",
    "Do I need an agent to buy a policy?",
    "My travel agent booked the hotel, am I covered?",
    "Can a person under 18 buy life insurance?",
    "I need someone to sign the form for my son",
    "How many people does family cover include?",
    "Who is my agent?",
    "I already spoke to an agent yesterday",
    "Does the policy cover humanitarian missions?",
    "کارشناسی خسارت چقدر طول می‌کشد؟",  # "damage assessment", not "an expert"
    "کارشناس ظرف دو روز خودرو را بازدید می‌کند؟",
    "کارشناس بیمه گفت باید مدارک را بفرستم",
    "اپراتور تلفن همراهم عوض شده، شماره‌ام را چطور تغییر دهم؟",
    "بیمه نیروی انسانی شرکت چه شرایطی دارد؟",  # "workforce"
    "با اپراتور صحبت کردم ولی جوابی نگرفتم",  # it happened; no request
    "人工晶体手术报销吗？",  # "artificial lens"
    "需要人工授精的费用能报销吗？",  # "artificial insemination"
    "客服人员说已经处理了，为什么还没到账？",
    "我想找个人寿险产品",  # 个人寿险: "personal life insurance"
    "修车的人工费报销吗？",  # "labour cost"
    "真人秀节目的意外险怎么买？",
    "如何联系客服？",  # a question the FAQ answers
]


@pytest.mark.parametrize(
    ("lang", "text"), [(lang, text) for lang, texts in REQUESTS.items() for text in texts]
)
def test_a_request_for_a_person_is_recognised(lang: Language, text: str) -> None:
    assert detect_language(text) == lang
    assert asks_for_person(text)


@pytest.mark.parametrize("text", MENTIONS)
def test_a_mention_of_a_person_is_not_a_request(text: str) -> None:
    assert not asks_for_person(text)


@pytest.mark.parametrize("text", MENTIONS)
async def test_the_builtin_model_does_not_escalate_on_a_mention(text: str) -> None:
    reply = await BuiltinChatModel().ainvoke([SystemMessage("FAQ"), HumanMessage(text)])
    assert reply.additional_kwargs[METADATA_KEY]["status"] != "escalate"


@pytest.mark.parametrize("lang", ["fa", "zh", "en"])
async def test_the_builtin_model_escalates_on_every_request(lang: Language) -> None:
    for text in REQUESTS[lang]:
        reply = await BuiltinChatModel().ainvoke([SystemMessage("FAQ"), HumanMessage(text)])
        assert reply.additional_kwargs[METADATA_KEY]["status"] == "escalate", text
        assert reply.content == HANDOFF_MESSAGES[lang]


# ---------------------------------------------------------------------------------------------
# The rule, as the agent stamps it


def stamped(text: str, status: str) -> AIMessage:
    """An earlier answer as the agent stored it (any model)."""
    return AIMessage(text, response_metadata={"threadkeeper": {"status": status}})


def test_stamp_escalates_a_real_models_answer_to_a_request_for_a_person() -> None:
    answer = AIMessage("Sure, a colleague will take over.")
    conversation: list[BaseMessage] = [HumanMessage("Can I talk to a human please?"), answer]
    assert stamp_for(answer, [], conversation).status == "escalate"
    assert stamp_for(answer, [], [HumanMessage("What is covered?"), answer]).status == ("answered")


def test_stamp_escalates_after_repeated_clarifications_of_any_model() -> None:
    answer = AIMessage("Dental cover pays for fillings.")
    clarifications = [
        message
        for _ in range(CLARIFICATIONS_BEFORE_ESCALATION)
        for message in (HumanMessage("hm?"), stamped("Which product do you mean?", "clarifying"))
    ]
    conversation = [*clarifications, HumanMessage("dental"), answer]
    assert escalation_due(conversation)
    assert stamp_for(answer, [], conversation).status == "escalate"
    # one clarification fewer, or an answer in between: no escalation
    fewer = [*clarifications[2:], HumanMessage("dental"), answer]
    assert stamp_for(answer, [], fewer).status == "answered"
    between = [
        *clarifications[:2],
        HumanMessage("dental"),
        stamped("An answer.", "answered"),
        *clarifications[2:],
        HumanMessage("dental"),
        answer,
    ]
    assert stamp_for(answer, [], between).status == "answered"


class _RecentOnly(Sequence[BaseMessage]):
    """A long history that fails if anything reads a message older than ``keep`` from the end."""

    def __init__(self, messages: list[BaseMessage], keep: int) -> None:
        self._messages, self._keep = messages, keep

    def __len__(self) -> int:
        return len(self._messages)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice) or index < len(self._messages) - self._keep:
            raise AssertionError(f"read old history: {index!r}")
        return self._messages[index]


def test_the_rule_reads_only_the_newest_turns_of_a_long_thread() -> None:
    """Issue 12 (flat turns): the rule was a pass over the whole history on every run."""
    old: list[BaseMessage] = [
        m for i in range(300) for m in (HumanMessage(f"q{i}"), AIMessage(f"a{i}."))
    ]
    clarifying = [
        m
        for _ in range(CLARIFICATIONS_BEFORE_ESCALATION)
        for m in (HumanMessage("hm?"), stamped("Which product do you mean?", "clarifying"))
    ]
    keep = 2 * CLARIFICATIONS_BEFORE_ESCALATION + 2
    assert escalation_due(_RecentOnly([*old, *clarifying, HumanMessage("dental")], keep))
    assert not escalation_due(_RecentOnly([*old, HumanMessage("dental")], keep))
    assert escalation_due(_RecentOnly([*old, HumanMessage("Can I talk to a human?")], 1))


# ---------------------------------------------------------------------------------------------
# A real model inside the real agent and service

CALLER = Caller(tenant_id="acme-insurance", user_id="user-1")


@pytest.fixture
async def backend(tmp_path: Path) -> AsyncIterator[Any]:
    async with open_embedded(tmp_path / "data") as opened:
        yield opened


def service_with(model: ScriptedChatModel, backend: Any, tmp_path: Path) -> RunService:
    # model="builtin" in the settings only picks the rule-based memory extractor, so the
    # script feeds the agent alone; the agent runs the scripted model
    settings = Settings.of(data_dir=str(tmp_path / "data"))
    return build_service(
        settings=settings,
        backend=backend,
        counter=EstimatingCounter(),
        knowledge=KnowledgeBase.from_directory(),
        model=model,
    )


async def run(service: RunService, thread_id: str, content: str) -> dict[str, Any]:
    handle = await service.start_run(CALLER, thread_id, RunRequest(RunMessage(content)))
    return msgspec.to_builtins(await handle.result())  # type: ignore[no-any-return]


async def test_a_real_model_escalates_when_asked_for_a_person(backend: Any, tmp_path: Path) -> None:
    model = ScriptedChatModel(
        script=[
            AIMessage("Dental cover pays for fillings at 80% [dental-cover.en#2]."),
            AIMessage("Of course, a colleague will take over this conversation."),
        ]
    )
    service = service_with(model, backend, tmp_path)
    first = await run(service, "t-1", "I am married and have two kids. Are fillings covered?")
    assert first["status"] == "answered"
    assert "handoff_context" not in first
    await service.wait_idle()  # its memory: follow-up work, done after the answer

    body = await run(service, "t-1", "Can I talk to a human please?")
    await service.wait_idle()

    assert body["status"] == "escalate"
    handoff = body["handoff_context"]
    assert set(handoff) == {"conversation_summary", "profile", "recent_messages"}
    assert {"key": "household", "value": "married; 2 children"} in handoff["profile"]
    contents = [m["content"] for m in handoff["recent_messages"]]
    assert contents[0] == "I am married and have two kids. Are fillings covered?"
    assert "Can I talk to a human please?" in contents


@pytest.mark.parametrize(
    "text", ["می‌خواهم با یک کارشناس صحبت کنم", "我要转人工客服", "connect me to an agent"]
)
async def test_a_real_model_escalates_in_every_language(
    backend: Any, tmp_path: Path, text: str
) -> None:
    service = service_with(ScriptedChatModel(default="OK."), backend, tmp_path)
    body = await run(service, "t-lang", text)
    await service.wait_idle()
    assert body["status"] == "escalate"
    assert "handoff_context" in body


async def test_a_real_model_escalates_after_two_clarifications(
    backend: Any, tmp_path: Path
) -> None:
    model = ScriptedChatModel(default="Which insurance product do you mean?")
    service = service_with(model, backend, tmp_path)
    statuses = [(await run(service, "t-2", "blorp zzxq?"))["status"] for _ in range(2)]
    assert statuses == ["clarifying"] * CLARIFICATIONS_BEFORE_ESCALATION

    body = await run(service, "t-2", "blorp zzxq?")
    await service.wait_idle()

    assert body["status"] == "escalate"
    recent = body["handoff_context"]["recent_messages"]
    assert [m["role"] for m in recent[:4]] == ["human", "ai", "human", "ai"]
    # issue 10: not the model's third clarifying question, but the hand-off
    assert body["message"]["content"] == HANDOFF_MESSAGES["en"]


async def test_a_real_model_answering_a_mention_of_an_agent_does_not_escalate(
    backend: Any, tmp_path: Path
) -> None:
    service = service_with(
        ScriptedChatModel(default="Yes, your agent can file it."), backend, tmp_path
    )
    body = await run(service, "t-3", "Can my insurance agent file the claim?")
    await service.wait_idle()
    assert body["status"] == "answered"
    assert "handoff_context" not in body
