"""``AtomicSaver``: a run's checkpoint writes reach the real saver only when it commits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from tests.support.scripted_model import ScriptedChatModel
from threadkeeper.adapters.atomic import AtomicSaver


class SlowModel(ScriptedChatModel):
    async def _agenerate(self, messages: list[BaseMessage], *args: Any, **kwargs: Any) -> Any:
        await asyncio.sleep(0.3)
        return self._generate(messages)


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


async def ids(agent: Any, thread: str) -> list[str | None]:
    state = await agent.aget_state(config(thread))
    return [m.id for m in (state.values or {}).get("messages", [])]


@pytest.fixture
def saver() -> AtomicSaver:
    return AtomicSaver(InMemorySaver())


async def test_nothing_reaches_the_saver_before_commit(saver: AtomicSaver) -> None:
    agent = create_agent(ScriptedChatModel(default="hello"), checkpointer=saver)
    with saver.staging("t") as staging:
        await agent.ainvoke({"messages": [HumanMessage("hi", id="h1")]}, config("t"))
        inside = await ids(agent, "t")  # the run reads its own staged writes
        assert inside[0] == "h1"
        assert await saver.base.aget_tuple(config("t")) is None
        await saver.commit(staging)
    assert await ids(agent, "t") == inside
    with pytest.raises(RuntimeError, match="already committed"):
        await saver.commit(staging)


async def test_a_run_that_fails_leaves_the_thread_as_it_was(saver: AtomicSaver) -> None:
    agent = create_agent(ScriptedChatModel(default="first"), checkpointer=saver)
    with saver.staging("t") as staging:
        await agent.ainvoke({"messages": [HumanMessage("one", id="h1")]}, config("t"))
        await saver.commit(staging)
    before = await ids(agent, "t")

    class Broken(ScriptedChatModel):
        async def _agenerate(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("provider down")

    broken = create_agent(Broken(), checkpointer=saver)
    with saver.staging("t"), pytest.raises(RuntimeError, match="provider down"):
        await broken.ainvoke({"messages": [HumanMessage("two", id="h2")]}, config("t"))
    assert await ids(agent, "t") == before


async def test_a_cancelled_run_leaves_the_thread_as_it_was(saver: AtomicSaver) -> None:
    agent = create_agent(SlowModel(default="slow"), checkpointer=saver)

    async def run() -> None:
        with saver.staging("t"):
            await agent.ainvoke({"messages": [HumanMessage("two", id="h2")]}, config("t"))

    task = asyncio.create_task(run())
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await ids(agent, "t") == []


async def test_other_threads_and_unstaged_writes_pass_through(saver: AtomicSaver) -> None:
    agent = create_agent(ScriptedChatModel(default="x"), checkpointer=saver)
    with saver.staging("staged"):
        await agent.ainvoke({"messages": [HumanMessage("a", id="a1")]}, config("other"))
    assert (await ids(agent, "other"))[0] == "a1"
    await agent.ainvoke({"messages": [HumanMessage("b", id="b1")]}, config("plain"))
    assert (await ids(agent, "plain"))[0] == "b1"


async def test_a_committed_thread_continues_from_the_committed_state(saver: AtomicSaver) -> None:
    agent = create_agent(
        ScriptedChatModel(script=[AIMessage("one"), AIMessage("two")]), checkpointer=saver
    )
    for index, text in enumerate(("first", "second")):
        with saver.staging("t") as staging:
            await agent.ainvoke(
                {"messages": [HumanMessage(text, id=f"h{index}")]}, config("t"), durability="exit"
            )
            await saver.commit(staging)
    state = await agent.aget_state(config("t"))
    assert [m.content for m in state.values["messages"]] == ["first", "one", "second", "two"]
    history = [c async for c in saver.base.alist(config("t"))]
    assert len(history) == 2, "one committed checkpoint per run (durability exit)"
