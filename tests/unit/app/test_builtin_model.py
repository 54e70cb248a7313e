"""The builtin chat model: what it answers from the messages it is given, in Persian, Chinese
and English; how it streams; and that it behaves like any provider inside ``create_agent``."""

from __future__ import annotations

import asyncio
import html
import json
import math
import operator
import re
import time
from collections.abc import Sequence
from functools import reduce
from typing import Any
from uuid import UUID

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import AsyncCallbackHandler
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.outputs import LLMResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from threadkeeper.adapters.builtin_model import (
    ANSWER_MAX_CHARS,
    FETCH_FAQ_DOCUMENT,
    BuiltinChatModel,
    DocumentChunk,
    estimate_input_tokens,
    parse_documents,
    stream_tokens,
)
from threadkeeper.domain.escalation import (
    CLARIFYING_QUESTIONS,
    HANDOFF_MESSAGES,
    METADATA_KEY,
    Language,
    detect_language,
)
from threadkeeper.domain.text import CJK_CLASS

LANGUAGES: tuple[Language, ...] = ("fa", "zh", "en")

CHUNKS: list[DocumentChunk] = [
    DocumentChunk(
        "dental-cover#0",
        "dental-cover",
        "Dental cover",
        "Dental cover pays for check-ups and fillings up to 500 euros a year. "
        "Orthodontics for adults is not covered. Claims must be filed within 90 days.",
    ),
    DocumentChunk(
        "dental-cover-fa#0",
        "dental-cover-fa",
        "پوشش دندانپزشکی",
        "بیمه دندانپزشکی هزینه معاینه و پرکردن دندان را تا سقف ۵۰۰ یورو در سال پرداخت می‌کند. "
        "ارتودنسی بزرگسالان پوشش داده نمی‌شود.",
    ),
    DocumentChunk(
        "dental-cover-zh#0",
        "dental-cover-zh",
        "牙科保障",
        "牙科保险每年最多报销500欧元的检查和补牙费用。成人正畸不在保障范围内。理赔须在90天内提交。",
    ),
    DocumentChunk(
        "travel#0",
        "travel",
        'Travel "abroad" & <lost> luggage',
        "Travel insurance covers medical emergencies abroad & lost luggage <up to 2,000 euros>.",
    ),
]
CHUNK_OF: dict[Language, DocumentChunk] = {"en": CHUNKS[0], "fa": CHUNKS[1], "zh": CHUNKS[2]}

QUESTION: dict[Language, str] = {
    "en": "Does dental cover pay for fillings?",
    "fa": "آیا بیمه دندانپزشکی هزینه پرکردن دندان را می‌دهد؟",
    "zh": "牙科保险报销补牙吗？",
}
OFF_TOPIC: dict[Language, str] = {
    "en": "What will the weather be like tomorrow?",
    "fa": "فردا هوا چطور است؟",
    "zh": "明天天气怎么样？",
}
DETAILS: dict[Language, str] = {
    "en": "Can I see the full details of dental cover?",
    "fa": "جزئیات کامل پوشش دندانپزشکی را می‌خواهم",
    "zh": "我想看牙科保障的详细内容",
}
PERSON: dict[Language, list[str]] = {
    "en": [
        "Can I talk to a human please?",
        "I want a real person",
        "Get me an agent",
        "let me speak to someone",
        "OPERATOR!",
        "I'd like a representative",
    ],
    "fa": [
        "می‌خواهم با اپراتور صحبت کنم",
        "لطفا وصل کنید به کارشناس",
        "می‌شه با یک انسان حرف بزنم؟",
        "پشتیبان انسانی می‌خواهم",
    ],
    "zh": ["转人工", "我要人工客服", "能找真人吗？", "请帮我接人工服务"],
}
NOT_A_PERSON = [
    "کارشناسی خسارت چقدر طول می‌کشد؟",  # "damage assessment", not "an expert"
    "人工晶体手术报销吗？",  # "artificial lens", not "a human"
    "Does the policy cover humanitarian missions?",
]
DOCUMENT: dict[Language, str] = {
    "en": "Dental cover\n"
    "Our plans are sold in three tiers. "
    "Dental cover pays for check-ups and fillings up to 500 euros a year. "
    "Premiums are billed monthly. "
    "Orthodontics for adults is not covered by dental cover. " + "Other products exist. " * 80,
    "fa": "پوشش دندانپزشکی\n"
    "طرح‌های ما در سه سطح عرضه می‌شوند. "
    "بیمه دندانپزشکی هزینه معاینه و پرکردن دندان را تا سقف ۵۰۰ یورو در سال پرداخت می‌کند. "
    "حق بیمه ماهانه دریافت می‌شود. " + "محصولات دیگری هم داریم. " * 80,
    "zh": "牙科保障\n我们的计划分为三个档次。牙科保障每年最多报销500欧元的检查和补牙费用。"
    "保费按月收取。" + "我们还有其他产品。" * 80,
}


def documents_block(chunks: Sequence[DocumentChunk]) -> str:
    """The documents block exactly as the retrieval step writes it (escaped text and
    attributes)."""
    docs = "\n".join(
        f'<doc chunk_id="{html.escape(c.chunk_id)}" doc_id="{html.escape(c.doc_id)}" '
        f'title="{html.escape(c.title)}">{html.escape(c.text)}</doc>'
        for c in chunks
    )
    return f"<documents>\n{docs}\n</documents>"


SYSTEM_WITH_DOCS = SystemMessage(
    "You answer insurance FAQ questions.\n<memory>\nname: Sara\ncity: Tehran\n</memory>\n"
    + documents_block(CHUNKS)
    + "\nSummary of earlier turns: the user asked about premiums."
)
SYSTEM_WITHOUT_DOCS = SystemMessage("You answer insurance FAQ questions.")


RELEVANT: dict[Language, str] = {
    "en": "Dental cover pays for check-ups and fillings up to 500 euros a year.",
    "fa": "بیمه دندانپزشکی هزینه معاینه و پرکردن دندان را تا سقف ۵۰۰ یورو در سال پرداخت می‌کند.",
    "zh": "牙科保障每年最多报销500欧元的检查和补牙费用。",
}
FILLER: dict[Language, str] = {"en": "Other products", "fa": "محصولات دیگری", "zh": "其他产品"}
DOCUMENT_BY_ID = {CHUNK_OF[lang].doc_id: DOCUMENT[lang] for lang in LANGUAGES}


@tool
def fetch_faq_document(doc_id: str) -> str:
    """Fetch the whole FAQ document with this id."""
    return DOCUMENT_BY_ID[doc_id]


@tool
def unrelated_tool(query: str) -> str:
    """A tool the model never calls."""
    return query


def status(message: BaseMessage) -> dict[str, Any]:
    meta = message.additional_kwargs[METADATA_KEY]
    assert isinstance(meta, dict)
    return meta


async def ask(
    messages: list[BaseMessage], *, tools: Sequence[Any] = (), **kwargs: Any
) -> AIMessage:
    model = BuiltinChatModel()
    runnable = model.bind_tools(list(tools), **kwargs) if tools else model
    reply = await runnable.ainvoke(messages)
    assert isinstance(reply, AIMessage)
    return reply


async def collect(
    messages: list[BaseMessage], model: BuiltinChatModel | None = None, *, tools: bool = False
) -> list[AIMessageChunk]:
    model = model or BuiltinChatModel()
    runnable = model.bind_tools([fetch_faq_document]) if tools else model
    return [chunk async for chunk in runnable.astream(messages)]  # type: ignore[misc]


def tool_round(lang: Language) -> list[BaseMessage]:
    call_id = f"call_{lang}"
    return [
        SYSTEM_WITH_DOCS,
        HumanMessage(DETAILS[lang]),
        AIMessage(
            "",
            tool_calls=[
                {
                    "name": FETCH_FAQ_DOCUMENT,
                    "args": {"doc_id": CHUNK_OF[lang].doc_id},
                    "id": call_id,
                    "type": "tool_call",
                }
            ],
        ),
        ToolMessage(DOCUMENT[lang], tool_call_id=call_id, name=FETCH_FAQ_DOCUMENT),
    ]


# ---------------------------------------------------------------------------------------------
# Input conventions


def test_documents_block_is_parsed_unescaped_amid_other_text() -> None:
    text = "Intro <b>text</b>\n" + documents_block(CHUNKS) + "\n<memory>\na: b\n</memory> tail"
    assert parse_documents(text) == CHUNKS


def test_text_outside_a_documents_block_is_not_a_document() -> None:
    assert parse_documents('<doc chunk_id="x#0" doc_id="x" title="t">loose</doc>') == []


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("Is dental covered?", "en"),
        ("آیا دندانپزشکی پوشش دارد؟", "fa"),
        ("هل التأمين يغطي الأسنان؟", "fa"),
        ("牙科保险报销吗？", "zh"),
        ("我想了解 Dental Plus 的保障范围", "zh"),
        ("پوشش SMS چیست؟", "fa"),
        ("", "en"),
        ("12345 ?", "en"),
    ],
)
def test_language_is_the_script_of_the_text(text: str, language: Language) -> None:
    assert detect_language(text) == language


# ---------------------------------------------------------------------------------------------
# Behaviour, per language


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_answers_from_documents_with_citations(lang: Language) -> None:
    reply = await ask([SYSTEM_WITH_DOCS, HumanMessage(QUESTION[lang])])

    assert status(reply) == {"status": "answered", "citations": [CHUNK_OF[lang].chunk_id]}
    assert isinstance(reply.content, str)
    assert reply.content
    assert reply.content in CHUNK_OF[lang].text  # extractive
    assert detect_language(reply.content) == lang
    assert not reply.tool_calls


async def test_answer_prefers_the_chunk_that_overlaps_most() -> None:
    reply = await ask([SYSTEM_WITH_DOCS, HumanMessage("Is lost luggage covered abroad?")])

    assert status(reply) == {"status": "answered", "citations": ["travel#0"]}
    assert reply.content == CHUNKS[3].text


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_clarifies_without_documents(lang: Language) -> None:
    reply = await ask([SYSTEM_WITHOUT_DOCS, HumanMessage(QUESTION[lang])])

    assert reply.content == CLARIFYING_QUESTIONS[lang]
    assert status(reply) == {"status": "clarifying", "citations": []}


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_clarifies_when_nothing_overlaps(lang: Language) -> None:
    reply = await ask([SYSTEM_WITH_DOCS, HumanMessage(OFF_TOPIC[lang])])

    assert reply.content == CLARIFYING_QUESTIONS[lang]
    assert status(reply)["status"] == "clarifying"


@pytest.mark.parametrize(
    ("lang", "text"), [(lang, text) for lang in LANGUAGES for text in PERSON[lang]]
)
async def test_escalates_when_asked_for_a_person(lang: Language, text: str) -> None:
    reply = await ask([SYSTEM_WITH_DOCS, HumanMessage(text)], tools=[fetch_faq_document])

    assert reply.content == HANDOFF_MESSAGES[lang]
    assert status(reply) == {"status": "escalate", "citations": []}


@pytest.mark.parametrize("text", NOT_A_PERSON)
async def test_look_alike_words_do_not_escalate(text: str) -> None:
    reply = await ask([SYSTEM_WITH_DOCS, HumanMessage(text)])

    assert status(reply)["status"] != "escalate"


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_escalates_after_two_clarifying_replies(lang: Language) -> None:
    history: list[BaseMessage] = [
        SYSTEM_WITH_DOCS,
        HumanMessage(OFF_TOPIC[lang]),
        AIMessage(CLARIFYING_QUESTIONS[lang]),  # recognised by its text alone
        HumanMessage(OFF_TOPIC[lang]),
        AIMessage(CLARIFYING_QUESTIONS[lang]),
        HumanMessage(QUESTION[lang]),
    ]
    reply = await ask(history)

    assert reply.content == HANDOFF_MESSAGES[lang]
    assert status(reply)["status"] == "escalate"


async def test_clarifying_status_in_metadata_counts_as_a_clarification() -> None:
    clarify = AIMessage(
        "Which product do you mean?",
        additional_kwargs={METADATA_KEY: {"status": "clarifying", "citations": []}},
    )
    history: list[BaseMessage] = [
        SYSTEM_WITHOUT_DOCS,
        HumanMessage("hm"),
        clarify,
        HumanMessage("hmm"),
        clarify,
        HumanMessage("well"),
    ]
    reply = await ask(history)

    assert status(reply)["status"] == "escalate"


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_one_clarification_or_an_answer_in_between_does_not_escalate(
    lang: Language,
) -> None:
    history: list[BaseMessage] = [
        SYSTEM_WITH_DOCS,
        HumanMessage(OFF_TOPIC[lang]),
        AIMessage(CLARIFYING_QUESTIONS[lang]),
        HumanMessage(QUESTION[lang]),
        AIMessage("An answer."),
        HumanMessage(OFF_TOPIC[lang]),
        AIMessage(CLARIFYING_QUESTIONS[lang]),
        HumanMessage(QUESTION[lang]),
    ]
    reply = await ask(history)

    assert status(reply)["status"] == "answered"


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_details_request_calls_the_fetch_tool(lang: Language) -> None:
    messages: list[BaseMessage] = [SYSTEM_WITH_DOCS, HumanMessage(DETAILS[lang])]
    reply = await ask(messages, tools=[fetch_faq_document, unrelated_tool])

    assert reply.content == ""
    assert METADATA_KEY not in reply.additional_kwargs  # tool calls carry no status
    [call] = reply.tool_calls
    assert call["name"] == FETCH_FAQ_DOCUMENT
    assert call["args"] == {"doc_id": CHUNK_OF[lang].doc_id}
    assert call["id"] is not None
    assert call["id"].startswith("call_")
    again = await ask(messages, tools=[fetch_faq_document])
    assert again.tool_calls == reply.tool_calls  # deterministic id


@pytest.mark.parametrize("lang", LANGUAGES)
@pytest.mark.parametrize(
    ("tools", "bind_kwargs"),
    [
        ((), {}),
        ((unrelated_tool,), {}),
        ((fetch_faq_document,), {"tool_choice": "none"}),
    ],
    ids=["no-tools", "other-tool-only", "tool-choice-none"],
)
async def test_details_request_without_the_tool_is_answered_from_chunks(
    lang: Language, tools: tuple[Any, ...], bind_kwargs: dict[str, Any]
) -> None:
    reply = await ask([SYSTEM_WITH_DOCS, HumanMessage(DETAILS[lang])], tools=tools, **bind_kwargs)

    assert not reply.tool_calls
    assert status(reply) == {"status": "answered", "citations": [CHUNK_OF[lang].chunk_id]}


async def test_details_request_without_documents_does_not_call_the_tool() -> None:
    reply = await ask(
        [SYSTEM_WITHOUT_DOCS, HumanMessage(DETAILS["en"])], tools=[fetch_faq_document]
    )

    assert not reply.tool_calls
    assert status(reply)["status"] == "clarifying"


@pytest.mark.parametrize("lang", LANGUAGES)
async def test_answers_extractively_after_the_tool_result(lang: Language) -> None:
    reply = await ask(tool_round(lang), tools=[fetch_faq_document])

    assert not reply.tool_calls
    assert status(reply) == {"status": "answered", "citations": [CHUNK_OF[lang].chunk_id]}
    assert isinstance(reply.content, str)
    assert 0 < len(reply.content) <= ANSWER_MAX_CHARS
    assert detect_language(reply.content) == lang
    # the sentence that answers the question first: no heading line, no opening remark
    assert reply.content.startswith(RELEVANT[lang])
    assert FILLER[lang] not in reply.content  # not the irrelevant rest


async def test_tool_result_without_overlap_gives_the_documents_opening() -> None:
    messages = tool_round("en")
    messages[1] = HumanMessage("Full details please")

    reply = await ask(messages, tools=[fetch_faq_document])

    assert isinstance(reply.content, str)
    assert reply.content.startswith("Our plans are sold in three tiers.")
    assert len(reply.content) <= ANSWER_MAX_CHARS
    assert status(reply)["status"] == "answered"


async def test_tool_result_for_a_doc_outside_the_block_cites_nothing() -> None:
    messages = tool_round("en")
    messages[0] = SYSTEM_WITHOUT_DOCS

    reply = await ask(messages, tools=[fetch_faq_document])

    assert status(reply) == {"status": "answered", "citations": []}
    assert isinstance(reply.content, str)
    assert "fillings" in reply.content


@pytest.mark.parametrize(
    ("earlier", "newest"),
    [("en", "fa"), ("fa", "zh"), ("zh", "en"), ("en", "zh"), ("zh", "fa"), ("fa", "en")],
)
async def test_reply_language_follows_the_newest_human_message(
    earlier: Language, newest: Language
) -> None:
    history: list[BaseMessage] = [
        SYSTEM_WITH_DOCS,
        HumanMessage(QUESTION[earlier]),
        AIMessage(CHUNK_OF[earlier].text),
        HumanMessage(QUESTION[newest]),
    ]
    answered = await ask(history)
    history[0] = SYSTEM_WITHOUT_DOCS
    clarified = await ask(history)

    assert status(answered)["citations"] == [CHUNK_OF[newest].chunk_id]
    assert isinstance(answered.content, str)
    assert detect_language(answered.content) == newest
    assert clarified.content == CLARIFYING_QUESTIONS[newest]


async def test_stop_sequence_cuts_the_reply() -> None:
    model = BuiltinChatModel()
    reply = await model.ainvoke([SYSTEM_WITH_DOCS, HumanMessage(QUESTION["en"])], stop=["500"])

    assert reply.content == "Dental cover pays for check-ups and fillings up to "


# ---------------------------------------------------------------------------------------------
# Usage, streaming, determinism


async def test_usage_counts_input_characters_and_streamed_tokens() -> None:
    messages: list[BaseMessage] = [SYSTEM_WITH_DOCS, HumanMessage(QUESTION["en"])]
    reply = await ask(messages)
    chunks = await collect(messages)

    assert reply.usage_metadata is not None
    chars = sum(len(str(m.content)) for m in messages)
    cjk = sum(1 for ch in "".join(str(m.content) for m in messages) if "\u4e00" <= ch <= "\u9fff")
    assert reply.usage_metadata["input_tokens"] == cjk + -(-(chars - cjk) // 4)
    assert reply.usage_metadata["output_tokens"] == len(chunks)
    total = reply.usage_metadata["input_tokens"] + reply.usage_metadata["output_tokens"]
    assert reply.usage_metadata["total_tokens"] == total


@pytest.mark.parametrize(
    ("text", "language", "tokens"),
    [
        ("Dental cover pays.", "en", ["Dental ", "cover ", "pays."]),
        ("  leading  space ", "en", ["  leading  ", "space "]),
        ("بیمه دندان را می‌دهد؟", "fa", ["بیمه ", "دندان ", "را ", "می‌دهد؟"]),
        (
            "牙科保险，报销500欧元。",
            "zh",
            ["牙", "科", "保", "险，", "报", "销", "500", "欧", "元。"],
        ),
        ("成人 APP 正畸！", "zh", ["成", "人 ", "APP ", "正", "畸！"]),
        ("", "en", []),
    ],
)
def test_stream_tokens(text: str, language: Language, tokens: list[str]) -> None:
    assert stream_tokens(text, language) == tokens
    assert "".join(tokens) == text


def _scenarios() -> list[Any]:
    out: list[Any] = []
    for lang in LANGUAGES:
        cases: dict[str, list[BaseMessage]] = {
            "answer": [SYSTEM_WITH_DOCS, HumanMessage(QUESTION[lang])],
            "clarify": [SYSTEM_WITHOUT_DOCS, HumanMessage(QUESTION[lang])],
            "escalate": [SYSTEM_WITH_DOCS, HumanMessage(PERSON[lang][0])],
            "tool-call": [SYSTEM_WITH_DOCS, HumanMessage(DETAILS[lang])],
            "after-tool": tool_round(lang),
        }
        out += [pytest.param(lang, m, id=f"{name}-{lang}") for name, m in cases.items()]
    return out


SCENARIOS = _scenarios()


@pytest.mark.parametrize(("lang", "messages"), SCENARIOS)
async def test_stream_concatenates_to_the_invoke_result(
    lang: Language, messages: list[BaseMessage]
) -> None:
    model = BuiltinChatModel()
    bound = model.bind_tools([fetch_faq_document])
    invoked = await bound.ainvoke(messages)
    chunks = await collect(messages, model, tools=True)

    streamed = reduce(operator.add, chunks)
    assert streamed.content == invoked.content
    assert streamed.additional_kwargs == invoked.additional_kwargs
    assert streamed.tool_calls == invoked.tool_calls
    assert streamed.usage_metadata == invoked.usage_metadata
    assert streamed.response_metadata["finish_reason"] == invoked.response_metadata["finish_reason"]
    # the metadata rides on the last chunk only
    assert chunks[-1].chunk_position == "last"
    assert all(not c.additional_kwargs and c.usage_metadata is None for c in chunks[:-1])
    if invoked.tool_calls:
        assert len(chunks) == 1
        assert chunks[0].tool_call_chunks[0]["name"] == FETCH_FAQ_DOCUMENT
    else:
        assert [c.content for c in chunks] == stream_tokens(str(invoked.content), lang)
        assert len(chunks) > 1


def test_sync_stream_matches_invoke() -> None:
    model = BuiltinChatModel()
    messages: list[BaseMessage] = [SYSTEM_WITH_DOCS, HumanMessage(QUESTION["zh"])]
    chunks = list(model.stream(messages))
    invoked = model.invoke(messages)

    streamed = reduce(operator.add, chunks)
    assert streamed.content == invoked.content
    assert streamed.additional_kwargs == invoked.additional_kwargs
    assert streamed.usage_metadata == invoked.usage_metadata
    assert [c.content for c in chunks] == stream_tokens(str(invoked.content), "zh")
    assert chunks[-1].content == "用。"  # one character each, punctuation attached


async def test_token_delay_is_applied_to_every_streamed_token() -> None:
    delay_ms = 15.0
    model = BuiltinChatModel(token_delay_ms=delay_ms)
    messages: list[BaseMessage] = [SYSTEM_WITH_DOCS, HumanMessage(QUESTION["en"])]

    started = time.monotonic()
    chunks = await collect(messages, model)
    elapsed = time.monotonic() - started

    assert len(chunks) > 5
    # a lower bound only (1 ms slack for the clock); no upper bound on a busy machine
    assert elapsed >= len(chunks) * delay_ms / 1000 - 0.001


def test_token_delay_applies_to_sync_stream_and_invoke() -> None:
    delay_ms = 10.0
    model = BuiltinChatModel(token_delay_ms=delay_ms)
    messages: list[BaseMessage] = [SYSTEM_WITHOUT_DOCS, HumanMessage(QUESTION["en"])]

    started = time.monotonic()
    n = len(list(model.stream(messages)))
    streamed = time.monotonic() - started
    started = time.monotonic()
    model.invoke(messages)
    invoked = time.monotonic() - started

    assert streamed >= n * delay_ms / 1000 - 0.001
    assert invoked >= n * delay_ms / 1000 - 0.001


def test_token_delay_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="greater than or equal"):
        BuiltinChatModel(token_delay_ms=-1)


@pytest.mark.parametrize(("lang", "messages"), SCENARIOS)
async def test_same_input_same_output(lang: Language, messages: list[BaseMessage]) -> None:
    first = await collect(messages, BuiltinChatModel(), tools=True)
    second = await collect(messages, BuiltinChatModel(), tools=True)

    def essence(chunks: list[AIMessageChunk]) -> list[tuple[Any, ...]]:
        return [
            (c.content, c.additional_kwargs, c.tool_call_chunks, c.usage_metadata) for c in chunks
        ]

    assert essence(first) == essence(second)


class RunEnds(AsyncCallbackHandler):
    def __init__(self) -> None:
        self.errors: list[BaseException] = []
        self.ends = 0

    async def on_llm_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self.errors.append(error)

    async def on_llm_end(self, response: LLMResult, *, run_id: UUID, **kwargs: Any) -> None:
        self.ends += 1


async def test_cancelling_astream_midway_propagates_and_leaks_nothing() -> None:
    model = BuiltinChatModel(token_delay_ms=20)
    handler = RunEnds()
    received: list[str] = []
    two_tokens = asyncio.Event()

    async def consume() -> None:
        messages: list[BaseMessage] = [SYSTEM_WITH_DOCS, HumanMessage(QUESTION["en"])]
        async for chunk in model.astream(messages, config={"callbacks": [handler]}):
            received.append(str(chunk.content))
            if len(received) == 2:
                two_tokens.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(two_tokens.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert task.cancelled()
    assert 2 <= len(received) < 10
    assert asyncio.all_tasks() == {asyncio.current_task()}
    assert len(handler.errors) == 1
    assert isinstance(handler.errors[0], asyncio.CancelledError)  # the model run was closed
    assert handler.ends == 0


# ---------------------------------------------------------------------------------------------
# Inside a real agent


async def test_details_question_inside_create_agent_fetches_then_answers() -> None:
    @tool(FETCH_FAQ_DOCUMENT)
    def fetch(doc_id: str) -> str:
        """Fetch the whole FAQ document with this id."""
        return DOCUMENT["en"]

    agent = create_agent(
        BuiltinChatModel(),
        tools=[fetch],
        system_prompt="You answer insurance FAQ questions.\n" + documents_block(CHUNKS),
        checkpointer=InMemorySaver(),
    )
    config: Any = {"configurable": {"thread_id": "t-1"}}

    deltas: list[str] = []
    async for message, _meta in agent.astream(
        {"messages": [HumanMessage(DETAILS["en"])]}, config, stream_mode="messages"
    ):
        if isinstance(message, AIMessageChunk):
            deltas.append(str(message.content))
    state = await agent.aget_state(config)
    messages: list[BaseMessage] = state.values["messages"]

    assert [type(m).__name__ for m in messages] == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
    ]
    call = messages[1]
    assert isinstance(call, AIMessage)
    assert call.tool_calls[0]["name"] == FETCH_FAQ_DOCUMENT
    assert call.tool_calls[0]["args"] == {"doc_id": "dental-cover"}
    result = messages[2]
    assert isinstance(result, ToolMessage)
    assert result.tool_call_id == call.tool_calls[0]["id"]
    assert result.content == DOCUMENT["en"]
    final = messages[3]
    assert isinstance(final, AIMessage)
    assert status(final) == {"status": "answered", "citations": ["dental-cover#0"]}
    assert isinstance(final.content, str)
    assert "fillings up to 500 euros" in final.content
    assert final.usage_metadata is not None
    assert "".join(deltas) == final.content  # streamed token by token, nothing duplicated


async def test_a_title_line_is_not_the_answer_when_body_text_matches() -> None:
    chunk = DocumentChunk(
        "dental#0", "dental", "Dental cover", "Dental cover\nDental cover pays for fillings."
    )
    system = SystemMessage(documents_block([chunk]))

    reply = await ask([system, HumanMessage("dental cover?")])

    assert reply.content == "Dental cover pays for fillings."


def _estimate_over_the_joined_text(messages: Sequence[BaseMessage]) -> int:
    """The estimate as it was written first: one pass over all the text, joined."""
    parts: list[str] = []
    for message in messages:
        parts.append(str(message.text))
        if isinstance(message, AIMessage):
            parts.extend(
                json.dumps(c["args"], ensure_ascii=False, sort_keys=True)
                for c in message.tool_calls
            )
    text = "".join(parts)
    cjk = len(re.findall(f"[{CJK_CLASS}]", text))
    return cjk + math.ceil((len(text) - cjk) / 4)


def test_the_input_estimate_adds_per_message_what_one_pass_over_the_joined_text_counts() -> None:
    """Counted per message and remembered per message object (a late turn's window is the
    history's same objects run after run), the estimate is the one-pass figure; a message
    given other content is counted again."""
    call = {"name": FETCH_FAQ_DOCUMENT, "args": {"doc_id": "牙科"}, "id": "c1", "type": "tool_call"}
    messages: list[BaseMessage] = [
        SystemMessage("You answer from the FAQ."),
        HumanMessage("Is dental covered? 牙科保险包括什么？"),
        AIMessage("", tool_calls=[call]),
        ToolMessage("牙科保险每年最多报销500欧元。", tool_call_id="c1"),
        AIMessage("Yes: up to 500 euros a year. 是的。"),
        HumanMessage("بیمه دندانپزشکی چقدر است؟ abc"),
    ]
    expected = _estimate_over_the_joined_text(messages)
    assert estimate_input_tokens(messages) == estimate_input_tokens(messages) == expected
    for prefix in range(len(messages) + 1):  # every tail of a thread: the sum is exact
        assert estimate_input_tokens(messages[:prefix]) == _estimate_over_the_joined_text(
            messages[:prefix]
        )
    messages[4].content = "是的" * 40  # an assigned field: counted afresh, not remembered
    assert estimate_input_tokens(messages) == _estimate_over_the_joined_text(messages) > expected
