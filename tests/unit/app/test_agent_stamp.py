"""The final answer is stamped as the model call returns: the model node writes it stamped,
once, and no step after it writes the answer again (issue 12: an ``after_model`` step was a
whole superstep and another merge into the thread's messages on every run)."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

from threadkeeper.adapters.builtin_model import BuiltinChatModel
from threadkeeper.adapters.knowledge import KnowledgeBase
from threadkeeper.app.agent import build_agent


def _agent() -> Any:
    return build_agent(
        model=BuiltinChatModel(),
        tools=[],
        knowledge=KnowledgeBase.from_directory(),
        history_hooks=[],
        checkpointer=InMemorySaver(),
        store=InMemoryStore(),
    )


async def test_the_model_node_writes_the_stamped_answer_and_nothing_writes_it_again() -> None:
    agent = _agent()
    config: Any = {
        "configurable": {"thread_id": "t-1", "tenant_id": "acme", "user_id": "u-1"},
    }
    writes: list[tuple[str, list[Any]]] = []
    async for update in agent.astream(
        {"messages": [HumanMessage("Is dental treatment covered?", id="h-1")]},
        config,
        stream_mode="updates",
    ):
        for node, values in update.items():
            if isinstance(values, dict) and values.get("messages"):
                writes.append((node, list(values["messages"])))
    answers = [(node, m) for node, ms in writes for m in ms if isinstance(m, AIMessage)]
    assert [node for node, _ in answers] == ["model"]  # written once, by the model node
    stamp = answers[0][1].response_metadata["threadkeeper"]
    assert stamp["status"] == "answered"
    assert stamp["citations"]
    assert stamp["at"]
    state = await agent.aget_state(config)
    assert state.values["messages"][-1].response_metadata["threadkeeper"] == stamp
    assert not any(name.endswith("after_model") for name in agent.get_graph().nodes)
