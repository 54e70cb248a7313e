"""The peer's two graphs for ``langgraph dev`` (the LangGraph Agent Server, in-memory runtime).

* ``echo`` — one node that answers with the human message's text: the Agent Server's own cost
  per run (HTTP, run queue, in-memory checkpoints, streaming) with no agent in it.
* ``agent`` — ``langchain.agents.create_agent`` with a streaming fake chat model
  (``GenericFakeChatModel``: the reply is streamed word by word) and no tools: what a user
  would deploy on the Agent Server instead of threadkeeper, minus a real model. The reply has
  about as many words as threadkeeper's builtin model streams for the benchmark's question.

No checkpointer is passed: the Agent Server supplies its own (in memory; the benchmark starts it
with ``LANGGRAPH_DISABLE_FILE_PERSISTENCE=true``).
"""

from __future__ import annotations

import itertools
from typing import Annotated, Any

from langchain.agents import create_agent
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from typing_extensions import TypedDict

REPLY = (
    "Yes. Dental treatment is covered by the supplementary health plan: check-ups, fillings "
    "and extractions are reimbursed at 80 percent up to the yearly limit, orthodontics only "
    "for members under 18, and claims need the itemised invoice and the dentist's report. "
    "[dental-1]"
)


class EchoState(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _echo(state: EchoState) -> dict[str, Any]:
    return {"messages": [AIMessage(content=state["messages"][-1].content)]}


echo = StateGraph(EchoState).add_node("echo", _echo).add_edge(START, "echo").add_edge("echo", END)
echo = echo.compile(name="echo")

agent = create_agent(
    GenericFakeChatModel(messages=itertools.cycle([AIMessage(content=REPLY)])),
    tools=[],
    system_prompt="You answer questions about the member's insurance.",
    name="agent",
)
