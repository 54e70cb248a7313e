"""``ModelSummarizer``: with a real model configured, the model writes the rolling summary —
inside a real ``create_agent``, never leaking into the answer's stream, held to its token
limit, and falling back to the extractive summary when the model fails."""

from __future__ import annotations

import uuid
from typing import Any

from langchain.agents import create_agent
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from tests.support.scripted_model import ScriptedChatModel
from threadkeeper.app.container import summarizer_for
from threadkeeper.domain.summary import SUMMARY_HEADING, ExtractiveSummarizer
from threadkeeper.domain.tokens import CharacterCounter
from threadkeeper.hooks import HookSettings, ModelSummarizer, SummarizeMiddleware, TrimMiddleware

SYSTEM = "You are the assistant."
WRITTEN = "Sara has two children and asked about dental cover."


def human(text: str) -> HumanMessage:
    return HumanMessage(text, id=str(uuid.uuid4()))


def config() -> RunnableConfig:
    return {"configurable": {"thread_id": "t"}}


def agent_with(summary_model: ScriptedChatModel, main: ScriptedChatModel) -> Any:
    counter = CharacterCounter()
    settings = HookSettings(
        budget=600,
        counter=counter,
        summary_after_turns=3,
        summarizer=ModelSummarizer(summary_model, counter),
    )
    return create_agent(
        main,
        system_prompt=SYSTEM,
        middleware=[SummarizeMiddleware(settings), TrimMiddleware(settings)],
        checkpointer=InMemorySaver(),
    )


async def test_the_model_writes_the_summary_the_next_window_carries() -> None:
    summary_model = ScriptedChatModel(default=WRITTEN)
    main = ScriptedChatModel(default="Noted.")
    agent = agent_with(summary_model, main)
    await agent.ainvoke({"messages": [human("My name is Sara. I have two children.")]}, config())
    for turn in range(11):
        state = await agent.ainvoke({"messages": [human(f"Filler {turn}. " + "z" * 60)]}, config())

    assert summary_model.calls, "the summary model was never asked"
    asked = summary_model.calls[0]
    assert asked[0].type == "system"
    assert "User: My name is Sara. I have two children." in asked[1].content
    assert state["summary"]["text"] == f"{SUMMARY_HEADING}\n{WRITTEN}"
    # later folds hand the model its previous summary
    assert any(WRITTEN in call[1].content for call in summary_model.calls[1:])
    system_seen = main.calls[-1][0]
    assert WRITTEN in system_seen.content
    assert len(state["messages"]) == 24  # the summary never deletes history


async def test_the_summary_never_reaches_the_answer_stream() -> None:
    summary_model = ScriptedChatModel(default=WRITTEN)
    main = ScriptedChatModel(default="Noted.")
    agent = agent_with(summary_model, main)
    streamed: list[str] = []
    for turn in range(12):
        async for chunk, _ in agent.astream(
            {"messages": [human(f"Turn {turn}. " + "z" * 60)]}, config(), stream_mode="messages"
        ):
            if isinstance(chunk, (AIMessage, AIMessageChunk)):
                streamed.append(str(chunk.content))
    assert summary_model.calls, "no summary was written"
    assert streamed
    assert all(WRITTEN not in text for text in streamed), "the summary leaked into the stream"


async def test_a_long_reply_is_cut_to_the_summary_limit() -> None:
    counter = CharacterCounter()
    summarizer = ModelSummarizer(ScriptedChatModel(default="word " * 500), counter)
    text = await summarizer.summarize(None, [human("hello"), AIMessage("hi")], max_tokens=120)
    assert counter.count_system(text) <= 120
    assert counter.count_system(text + " word") > 120  # cut as late as the limit allows
    assert text.startswith(SUMMARY_HEADING)


async def test_a_failing_or_silent_model_falls_back_to_the_extractive_summary() -> None:
    counter = CharacterCounter()
    folded: list[BaseMessage] = [human("I have two kids. What is covered?"), AIMessage("Dental.")]
    expected = ExtractiveSummarizer(counter).fold(None, folded, max_tokens=200)

    def fail(_: list[BaseMessage]) -> AIMessage:
        raise RuntimeError("provider down")

    failing = ScriptedChatModel()
    failing.script.append(fail)
    assert await ModelSummarizer(failing, counter).summarize(None, folded, max_tokens=200) == (
        expected
    )
    silent = ScriptedChatModel(default="   ")
    assert await ModelSummarizer(silent, counter).summarize(None, folded, max_tokens=200) == (
        expected
    )


async def test_tool_steps_are_left_out_of_what_the_model_reads() -> None:
    model = ScriptedChatModel(default=WRITTEN)
    call = AIMessage("", tool_calls=[{"name": "faq", "args": {"doc_id": "d"}, "id": "c1"}])
    await ModelSummarizer(model, CharacterCounter()).summarize(
        None, [human("What is covered?"), call, AIMessage("Dental is.")], max_tokens=200
    )
    assert model.calls[0][1].content.endswith("User: What is covered?\nAssistant: Dental is.")


def test_only_a_real_model_writes_the_summary() -> None:
    counter = CharacterCounter()
    model = ScriptedChatModel()
    assert summarizer_for("builtin", model, counter) is None
    chosen = summarizer_for("openai:gpt-4o-mini", model, counter)
    assert isinstance(chosen, ModelSummarizer)
    assert chosen.model is model
