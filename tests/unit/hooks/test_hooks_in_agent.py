"""Each hook inside a real ``create_agent`` with a scripted chat model (tool calls included):
what the model received, and what state persisted."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver

from tests.support.scripted_model import ScriptedChatModel
from threadkeeper.domain.errors import MessageTooLarge
from threadkeeper.domain.history import Window, window_tokens
from threadkeeper.domain.tokens import REPLY_PRIMING, CharacterCounter
from threadkeeper.hooks import (
    CompactMiddleware,
    HookConfigError,
    HookSettings,
    SummarizeMiddleware,
    TrimMiddleware,
    TruncateToolResultsMiddleware,
    available_hooks,
    build_pipeline,
)

SYSTEM = "You answer insurance questions."
LONG_DOC = "Dental cover: " + "details " * 800  # ~6,400 characters


@tool
def fetch_faq(doc_id: str) -> str:
    """Fetch a whole FAQ document by id."""
    return LONG_DOC


def tool_call(call_id: str, doc_id: str = "dental") -> AIMessage:
    return AIMessage(
        "", tool_calls=[{"name": "fetch_faq", "args": {"doc_id": doc_id}, "id": call_id}]
    )


def human(text: str) -> HumanMessage:
    return HumanMessage(text, id=str(uuid.uuid4()))


def config(thread: str = "t") -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


def kinds(messages: list[BaseMessage]) -> list[str]:
    return [type(m).__name__.removesuffix("Message") for m in messages]


async def test_truncate_shows_the_model_a_cut_result_and_keeps_state_whole() -> None:
    model = ScriptedChatModel(script=[tool_call("c1"), AIMessage("Dental is covered.")])
    agent = create_agent(
        model,
        [fetch_faq],
        system_prompt=SYSTEM,
        middleware=[TruncateToolResultsMiddleware(max_chars=200)],
        checkpointer=InMemorySaver(),
    )
    state = await agent.ainvoke({"messages": [human("Is dental covered?")]}, config())

    seen = model.calls[1]
    assert kinds(seen) == ["System", "Human", "AI", "Tool"]
    shown = seen[-1]
    assert isinstance(shown, ToolMessage)
    assert shown.text.startswith(LONG_DOC[:200])
    assert "[truncated" in shown.content
    assert len(shown.content) < 300
    stored = state["messages"][2]
    assert isinstance(stored, ToolMessage)
    assert stored.content == LONG_DOC  # non-destructive
    assert shown.id != stored.id


async def test_trim_keeps_the_newest_turns_under_budget_and_persists_everything() -> None:
    counter = CharacterCounter()
    windows: list[Window] = []
    settings = HookSettings(budget=400, counter=counter, observer=windows.append)
    model = ScriptedChatModel(default="short answer")
    agent = create_agent(
        model,
        system_prompt=SYSTEM,
        middleware=[TrimMiddleware(settings)],
        checkpointer=InMemorySaver(),
    )
    for turn in range(8):
        state = await agent.ainvoke({"messages": [human(f"question {turn} " * 5)]}, config())

    assert len(state["messages"]) == 16  # nothing deleted
    seen = model.calls[-1]
    assert isinstance(seen[0], HumanMessage) or seen[0].type == "system"
    assert seen[0].content == SYSTEM
    assert seen[1].type == "human"
    assert seen[-1].content == "question 7 " * 5
    assert len(seen) - 1 < 16
    window = windows[-1]
    assert window_tokens(window, counter, SYSTEM) == window.tokens <= 400
    assert [m.id for m in seen[1:]] == [m.id for m in window.messages]


async def test_trim_never_splits_a_tool_call_from_its_result() -> None:
    counter = CharacterCounter()
    settings = HookSettings(budget=700, counter=counter)
    model = ScriptedChatModel(
        script=[tool_call("c1"), AIMessage("Covered."), tool_call("c2"), AIMessage("Also.")]
    )
    chain: list[Any] = [TruncateToolResultsMiddleware(max_chars=300), TrimMiddleware(settings)]
    agent = create_agent(
        model, [fetch_faq], system_prompt=SYSTEM, middleware=chain, checkpointer=InMemorySaver()
    )
    await agent.ainvoke({"messages": [human("Is dental covered?")]}, config())
    await agent.ainvoke({"messages": [human("And orthodontics?")]}, config())

    for seen in model.calls:
        ids_called = {c["id"] for m in seen if isinstance(m, AIMessage) for c in m.tool_calls}
        ids_answered = {m.tool_call_id for m in seen if isinstance(m, ToolMessage)}
        assert ids_called == ids_answered
        assert seen[1].type == "human"
    # The second turn's tool step did not leave room for the first turn: it was dropped whole.
    assert kinds(model.calls[-1]) == ["System", "Human", "AI", "Tool"]


async def test_trim_refuses_an_oversized_message() -> None:
    settings = HookSettings(budget=50, counter=CharacterCounter())
    model = ScriptedChatModel()
    agent = create_agent(model, middleware=[TrimMiddleware(settings)], checkpointer=InMemorySaver())
    with pytest.raises(MessageTooLarge) as caught:
        await agent.ainvoke({"messages": [human("x" * 100)]}, config())
    assert caught.value.budget == 50
    assert model.calls == []


async def test_summarize_folds_dropped_turns_and_trim_sends_the_summary() -> None:
    counter = CharacterCounter()
    settings = HookSettings(budget=600, counter=counter, summary_after_turns=3)
    model = ScriptedChatModel(default="Noted.")
    agent = create_agent(
        model,
        system_prompt=SYSTEM,
        middleware=[SummarizeMiddleware(settings), TrimMiddleware(settings)],
        checkpointer=InMemorySaver(),
    )
    await agent.ainvoke({"messages": [human("My name is Sara. I have two children.")]}, config())
    for turn in range(3):
        state = await agent.ainvoke({"messages": [human(f"Filler {turn}. " + "z" * 60)]}, config())
    assert not state.get("summary"), "no summary before the threshold"
    for turn in range(3, 12):
        state = await agent.ainvoke({"messages": [human(f"Filler {turn}. " + "z" * 60)]}, config())

    summary = state["summary"]
    assert summary["version"] >= 1
    assert "My name is Sara." in summary["text"]
    assert len(state["messages"]) == 26  # 13 turns: the summary never deletes history
    system_seen = model.calls[-1][0]
    assert system_seen.type == "system"
    assert system_seen.text.startswith(SYSTEM)
    assert summary["text"] in system_seen.content
    # the first turn is no longer in the window, only in the summary
    assert all("Sara" not in m.content for m in model.calls[-1][1:])
    # through_id points at the newest folded message, which is older than the window
    window_ids = {m.id for m in model.calls[-1][1:]}
    assert summary["through_id"] not in window_ids


@tool
def claim_status(claim_id: str) -> str:
    """Look up a claim's status."""
    return f"Claim {claim_id}: approved; " + "ledger entry " * 12


def claim_agent_reply(messages: list[BaseMessage]) -> AIMessage:
    """Calls ``claim_status`` on each new human message, answers once the result is in."""
    last = messages[-1]
    if isinstance(last, HumanMessage):
        call = {"name": "claim_status", "args": {"claim_id": str(last.id)}, "id": f"c-{last.id}"}
        return AIMessage("Let me look that up.", tool_calls=[call])
    assert isinstance(last, ToolMessage)
    return AIMessage(f"Answer {last.tool_call_id}. Anything else?")


async def test_summarize_with_tool_calls_folds_only_human_and_answer_text() -> None:
    counter = CharacterCounter()
    windows: list[Window] = []
    settings = HookSettings(
        budget=900, counter=counter, summary_after_turns=2, observer=windows.append
    )
    model = ScriptedChatModel()
    # appended, not passed to the constructor: pydantic would try to validate a function as
    # an AIMessage there (and fail with AttributeError)
    model.script.extend([claim_agent_reply] * 40)
    agent = create_agent(
        model,
        [claim_status],
        system_prompt=SYSTEM,
        middleware=[SummarizeMiddleware(settings), TrimMiddleware(settings)],
        checkpointer=InMemorySaver(),
    )
    first = HumanMessage("My claim was filed in May. It is for a broken tooth.", id="q0")
    state = await agent.ainvoke({"messages": [first]}, config())
    for turn in range(1, 8):
        question = HumanMessage(f"Status of claim {turn}? " + "z" * 40, id=f"q{turn}")
        state = await agent.ainvoke({"messages": [question]}, config())

    # every turn persisted whole: human, AI tool call, tool result, answer
    assert kinds(state["messages"]) == ["Human", "AI", "Tool", "AI"] * 8
    summary = state["summary"]
    assert summary["version"] >= 1
    text = summary["text"]
    assert "- User: My claim was filed in May." in text
    assert "- Assistant: Answer c-q0." in text
    # tool results and the text beside a tool call are not folded
    assert "ledger entry" not in text
    assert "Let me look that up." not in text
    by_id = {m.id: m for m in state["messages"]}
    assert isinstance(by_id[summary["through_id"]], HumanMessage | AIMessage)

    # what the model received on its last two calls (tool call, then answer) of the last run
    for seen, window in zip(model.calls[-2:], windows[-2:], strict=True):
        assert seen[0].type == "system"
        assert seen[0].text.startswith(SYSTEM)
        assert text in seen[0].content, "the rolling summary is sent with the system prompt"
        assert seen[1].type == "human"
        called = {c["id"] for m in seen if isinstance(m, AIMessage) for c in m.tool_calls}
        answered = {m.tool_call_id for m in seen if isinstance(m, ToolMessage)}
        assert called == answered, "no orphaned tool call or result"
        assert all("My claim was filed" not in m.content for m in seen[1:])
        assert summary["through_id"] not in {m.id for m in seen[1:]}
        assert window_tokens(window, counter, SYSTEM) == window.tokens <= 900
        assert [m.id for m in seen[1:]] == [m.id for m in window.messages]
    # the answering call saw the result of the call the model had just made
    answering = model.calls[-1]
    assert kinds(answering[-3:]) == ["Human", "AI", "Tool"]
    assert isinstance(answering[-1], ToolMessage)
    assert answering[-1].tool_call_id == "c-q7"


async def test_compact_rewrites_state_to_the_kept_window() -> None:
    counter = CharacterCounter()
    settings = HookSettings(budget=700, counter=counter, tool_result_max_chars=150)
    model = ScriptedChatModel(script=[tool_call("c1"), AIMessage("Covered.")], default="ok")
    agent = create_agent(
        model,
        [fetch_faq],
        system_prompt=SYSTEM,
        middleware=[CompactMiddleware(settings)],
        checkpointer=InMemorySaver(),
    )
    state = await agent.ainvoke({"messages": [human("Is dental covered?")]}, config())
    # The second model call of the run compacted the fresh tool result in state.
    tool_result = state["messages"][2]
    assert isinstance(tool_result, ToolMessage)
    assert len(tool_result.content) < 200
    assert tool_result.text.startswith(LONG_DOC[:150])
    assert tool_result.id is not None
    assert tool_result.id.endswith("~t150"), "a changed message gets a new id"
    # ... and that compacted result is what the model was shown, never the whole document
    assert len(model.calls) == 2
    assert kinds(model.calls[0]) == ["System", "Human"]
    assert kinds(model.calls[1]) == ["System", "Human", "AI", "Tool"]
    shown = model.calls[1][-1]
    assert shown.id == tool_result.id
    assert shown.content == tool_result.content
    assert [m.id for m in model.calls[1][1:]] == [m.id for m in state["messages"][:3]]

    state = await agent.ainvoke({"messages": [human("Thanks!")]}, config())
    stored = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert [m.id for m in stored] == [tool_result.id], "cutting again changes nothing"
    for turn in range(12):
        state = await agent.ainvoke({"messages": [human(f"question {turn} " * 4)]}, config())
    persisted = state["messages"]
    assert persisted[0].type == "human"
    assert len(persisted) < 2 * 14  # destructive: old turns are gone from state
    assert persisted[-2].content == "question 11 " * 4
    assert sum(counter.count(m) for m in persisted) <= 700

    # What the model received on every call: the system prompt, then a window starting on a
    # human message, no orphaned tool call or result, never the whole document, within budget.
    for seen in model.calls:
        assert seen[0].type == "system"
        assert seen[0].content == SYSTEM
        assert seen[1].type == "human"
        called = {c["id"] for m in seen if isinstance(m, AIMessage) for c in m.tool_calls}
        answered = {m.tool_call_id for m in seen if isinstance(m, ToolMessage)}
        assert called == answered
        assert all(len(m.content) < 200 for m in seen if isinstance(m, ToolMessage))
        sent = (
            REPLY_PRIMING + counter.count_system(SYSTEM) + sum(counter.count(m) for m in seen[1:])
        )
        assert sent <= 700
    # the last call was shown exactly the compacted state, which then got the model's answer
    last = model.calls[-1]
    assert [m.id for m in last[1:]] == [m.id for m in persisted[:-1]]
    assert persisted[-1].content == "ok"
    # the first turn, shown to the model in its first calls, is gone from state and window
    assert "Is dental covered?" in [m.content for m in model.calls[1]]
    assert "Is dental covered?" not in [m.content for m in last]
    assert "Is dental covered?" not in [m.content for m in persisted]


async def test_compact_drops_empty_ai_messages() -> None:
    counter = CharacterCounter()
    settings = HookSettings(budget=10_000, counter=counter)
    model = ScriptedChatModel(script=[AIMessage("")], default="fine")
    agent = create_agent(
        model, middleware=[CompactMiddleware(settings)], checkpointer=InMemorySaver()
    )
    state = await agent.ainvoke({"messages": [human("hello")]}, config())
    assert kinds(state["messages"]) == ["Human", "AI"]
    empty_id = state["messages"][1].id
    state = await agent.ainvoke({"messages": [human("again")]}, config())
    assert kinds(state["messages"]) == ["Human", "Human", "AI"]
    assert [m.content for m in state["messages"]] == ["hello", "again", "fine"]
    # the model never received the empty AI message: it was dropped before the second call
    assert [[m.content for m in seen] for seen in model.calls] == [["hello"], ["hello", "again"]]
    assert empty_id not in {m.id for seen in model.calls for m in seen}


async def test_compact_keeps_the_tool_result_the_model_just_asked_for() -> None:
    counter = CharacterCounter()
    settings = HookSettings(budget=800, counter=counter, tool_result_max_chars=2000)
    document = "Dental cover: " + "details " * 80  # the newest turn needs ~720 of 800 tokens

    @tool
    def fetch_dental(doc_id: str) -> str:
        """Fetch the dental FAQ."""
        return document

    model = ScriptedChatModel(default="ok")
    agent = create_agent(
        model,
        [fetch_dental],
        system_prompt="S",
        middleware=[CompactMiddleware(settings)],
        checkpointer=InMemorySaver(),
    )
    for turn in range(3):
        await agent.ainvoke({"messages": [human(f"question {turn} " * 8)]}, config())
    call = {"name": "fetch_dental", "args": {"doc_id": "dental"}, "id": "c-dental"}
    model.script[:] = [AIMessage("", tool_calls=[call]), AIMessage("Covered.")]
    state = await agent.ainvoke({"messages": [human("Is dental covered?")]}, config())

    newest_turn = state["messages"][-4:]
    assert kinds(newest_turn) == ["Human", "AI", "Tool", "AI"]
    needed = REPLY_PRIMING + counter.count_system("S") + sum(counter.count(m) for m in newest_turn)
    assert needed <= 800
    # the model's second call of the run must see the result of the call it just made
    assert kinds(model.calls[-1][-3:]) == ["Human", "AI", "Tool"]
    assert model.calls[-1][-1].content == document


def test_entry_points_name_every_builtin_hook() -> None:
    assert {"truncate_tool_results", "summarize", "trim", "compact"} <= set(available_hooks())


def test_pipeline_follows_the_configured_order() -> None:
    settings = HookSettings(counter=CharacterCounter())
    chain = build_pipeline(
        "truncate_tool_results, summarize ,trim", settings, allow_destructive=False
    )
    assert [m.name for m in chain] == ["truncate_tool_results", "summarize", "trim"]


@pytest.mark.parametrize(
    ("spec", "allow", "message"),
    [
        ("trim,nope", False, "unknown hook"),
        ("trim,trim", False, "more than once"),
        ("trim,summarize", False, "summarize must come before trim"),
        ("truncate_tool_results,compact", False, "deletes persisted messages"),
    ],
)
def test_pipeline_refuses_what_cannot_work(spec: str, allow: bool, message: str) -> None:
    with pytest.raises(HookConfigError, match=message):
        build_pipeline(spec, HookSettings(counter=CharacterCounter()), allow_destructive=allow)


# Third-party plugins through the entry-point group: see test_hook_plugins.py.


def test_compact_is_allowed_where_the_transcript_is_elsewhere() -> None:
    chain = build_pipeline(
        "truncate_tool_results,compact",
        HookSettings(counter=CharacterCounter()),
        allow_destructive=True,
    )
    assert [m.name for m in chain] == ["truncate_tool_results", "compact"]
