"""The agent: ``create_agent`` with threadkeeper's middleware, built once at start-up.

Order of work in a run: load memory and retrieve (``before_agent``) → the system message is
assembled from the prompt, the memory and the retrieved chunks (``wrap_model_call``,
outermost, so the history hooks count all of it) → the history hooks (``THREADKEEPER_HOOKS``)
→ model and tools → the final answer is stamped with its status, citations and time as the
model call returns (``wrap_model_call``, so the model node writes the stamped answer: no
``after_model`` step that would write it a second time, a whole superstep and a merge into the
thread's messages per run). Memory is written by the run service after the round is committed, so it
never learns from a round that was not stored.

Retrieved chunk text and the loaded memory are per-run state that is never checkpointed
(``UntrackedValue``); only the citations (chunk id, document id, title) persist, on the answer.
"""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Literal, NotRequired, Required, cast

from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AnyMessage,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import BaseTool
from langgraph.channels import UntrackedValue
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.config import get_config, get_stream_writer
from langgraph.prebuilt.tool_node import ToolCallRequest
from langgraph.runtime import Runtime
from langgraph.store.base import BaseStore
from langgraph.types import Command
from opentelemetry import trace as otel_trace

from threadkeeper.app.state import merge_messages
from threadkeeper.app.stored import load_memory
from threadkeeper.app.telemetry import (
    ModelCallTracing,
    capture_content,
    record_failure,
    tracer,
    untraced_langsmith_inline,
)
from threadkeeper.domain.escalation import HANDOFF_MESSAGES, detect_language, escalation_due
from threadkeeper.domain.history import Window
from threadkeeper.domain.prompt import render_system
from threadkeeper.domain.tokens import message_text
from threadkeeper.domain.transcript import ToolInvocation, arguments_digest
from threadkeeper.hooks.settings import ThreadState

if TYPE_CHECKING:  # the composition root passes the knowledge base in
    from threadkeeper.ports.knowledge import Knowledge

PROMPT_VERSION = "2026-11-29.1"
SYSTEM_PROMPT = (
    "You are the customer-service assistant of an insurance company. Answer only from the "
    "documents given to you, in the language the user writes in, and cite the chunks you "
    "used as [chunk_id]. If nothing in the documents answers the question, ask one short "
    "clarifying question. If the user asks for a person, say that a colleague will take over."
)
RETRIEVE_K = 3
_CITATION = re.compile(r"\[([A-Za-z0-9._:-]+#\d+)\]")


@dataclass
class RunTrace:
    """What one run's model was shown, collected as it happens (per-run records, replay).

    Untracked state is gone once the run ends, so the middleware reports it here; the run
    service sets a fresh trace in the run's context.
    """

    retrieved: list[dict[str, Any]] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)
    system_prompts: list[str] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    tools: list[ToolInvocation] = field(default_factory=list)
    """The run's tool calls, for the audit trail (redis-mysql's ``tool_invocations``)."""
    conversation_id: str | None = None
    """The thread as traces name it (``telemetry.ConversationIds``), for the model-call spans."""
    events: dict[str, int] = field(default_factory=dict)
    """What the history hooks did (``summary_fold``, ``compaction``): counted once stored."""
    model_call: Any = None
    """The model call in progress (``telemetry.ModelCallTiming``), for its time to first chunk."""

    def release(self) -> None:
        """Drop what the run was shown, once it is over: a context outlives its run wherever
        something captured it (a connection opened during the run keeps the context of its
        opening), and the trace must not keep the run's messages there."""
        self.retrieved, self.memory, self.system_prompts = [], [], []
        self.windows, self.tools, self.events = [], [], {}
        self.model_call = None


current_trace: ContextVar[RunTrace | None] = ContextVar("threadkeeper_trace", default=None)


def observe_window(window: Window) -> None:
    """``HookSettings.observer``: route each window to the run that produced it."""
    trace = current_trace.get()
    if trace is not None:
        trace.windows.append(window)


def observe_event(event: str) -> None:
    """``HookSettings.on_event``: count a hook's fold or compaction for the run it is in."""
    trace = current_trace.get()
    if trace is not None:
        trace.events[event] = trace.events.get(event, 0) + 1


class AgentState(ThreadState):
    messages: Required[Annotated[list[AnyMessage], merge_messages]]
    """``add_messages``' merge without its passes over the whole history (``app.state``)."""
    retrieved: NotRequired[Annotated[list[dict[str, Any]], UntrackedValue]]
    """This run's retrieved chunks (``chunk_id``, ``doc_id``, ``title``, ``text``)."""
    memory: NotRequired[Annotated[list[dict[str, Any]], UntrackedValue]]
    """This run's memory items (``kind``, ``key``, ``value``, ``updated_at``)."""


def caller_of(config: dict[str, Any]) -> tuple[str, str]:
    configurable = config.get("configurable", {})
    return str(configurable["tenant_id"]), str(configurable["user_id"])


def newest_human_text(messages: Sequence[Any]) -> str:
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return message_text(message)
    return ""


@dataclass(frozen=True, slots=True)
class Stamp:
    status: str
    citations: list[dict[str, str]]
    text: str | None = None
    """The answer's text when the rule replaces the model's: a clarifying question turned
    into an escalation is answered with the hand-off message (in the user's language)."""


def stamp_for(
    message: AIMessage,
    chunks: Sequence[dict[str, Any]],
    conversation: Sequence[BaseMessage] = (),
) -> Stamp:
    """Status and citations of a final answer.

    The escalation rule holds for every model (builtin or not): the run ends in ``escalate``
    when the newest human message of ``conversation`` (the thread's messages) asks for a
    person, or the final replies before it were clarifying
    :data:`~threadkeeper.domain.escalation.CLARIFICATIONS_BEFORE_ESCALATION` times in a row
    (:func:`~threadkeeper.domain.escalation.escalation_due`, the rule the builtin model
    applies to itself). Otherwise the builtin model states the status and citations
    (``additional_kwargs["threadkeeper"]``); for any other model the citations are the
    ``[chunk_id]`` markers of retrieved chunks in the text, and the status is ``clarifying``
    when nothing was retrieved and the answer is a question.
    """
    by_id = {c["chunk_id"]: c for c in chunks}
    told = message.additional_kwargs.get("threadkeeper") or {}
    text = message_text(message)
    if told.get("status") in {"answered", "clarifying", "escalate"}:
        status = str(told["status"])
        cited = [str(c) for c in told.get("citations", [])]
    else:
        cited = list(dict.fromkeys(_CITATION.findall(text)))
        asks = text.rstrip().endswith(("?", "؟", "？"))
        status = "clarifying" if not chunks and asks else "answered"
    replaced = None
    if escalation_due(conversation):
        if status == "clarifying":  # the user is not asked a third time: a person takes over
            replaced = HANDOFF_MESSAGES[detect_language(newest_human_text(conversation) or text)]
            cited = []
        status = "escalate"
    citations = [
        {"chunk_id": c, "doc_id": by_id[c]["doc_id"], "title": by_id[c]["title"]}
        for c in cited
        if c in by_id
    ]
    return Stamp(status, citations, replaced)


class ThreadContextMiddleware(AgentMiddleware[AgentState]):
    """Memory and retrieval in, system message assembled, answers stamped, tools reported."""

    state_schema = AgentState

    def __init__(self, knowledge: Knowledge, prompt: str = SYSTEM_PROMPT) -> None:
        super().__init__()
        self.knowledge = knowledge
        self.prompt = prompt

    @property
    def name(self) -> str:
        return "thread_context"

    async def abefore_agent(self, state: AgentState, runtime: Runtime[Any]) -> dict[str, Any]:
        tenant_id, user_id = caller_of(cast("dict[str, Any]", get_config()))
        write = get_stream_writer()
        write({"stage": "retrieval", "status": "start"})
        query = newest_human_text(state["messages"])
        with tracer().start_as_current_span(
            "threadkeeper.retrieve",
            attributes={"threadkeeper.tenant_id": tenant_id},
            record_exception=False,
        ) as span:
            found = self.knowledge.search(tenant_id, query, k=RETRIEVE_K) if query else []
            span.set_attribute("threadkeeper.retrieve.chunk_ids", [h.chunk.chunk_id for h in found])
            if capture_content():
                span.set_attribute("threadkeeper.retrieve.query", query)
        chunks = [
            {
                "chunk_id": hit.chunk.chunk_id,
                "doc_id": hit.chunk.doc_id,
                "title": hit.chunk.title,
                "text": hit.chunk.text,
                "score": round(float(hit.score), 4),
            }
            for hit in found
        ]
        write(
            {
                "stage": "retrieval",
                "status": "end",
                "chunks": [{"chunk_id": c["chunk_id"], "title": c["title"]} for c in chunks],
            }
        )
        memory = await load_memory(runtime.store, tenant_id, user_id) if runtime.store else []
        if (trace := current_trace.get()) is not None:
            trace.retrieved, trace.memory = chunks, memory
        return {"retrieved": chunks, "memory": memory}

    def _request(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        state = cast("dict[str, Any]", request.state)
        base = request.system_message.text if request.system_message else self.prompt
        text = render_system(base, state.get("memory") or [], state.get("retrieved") or [])
        if (trace := current_trace.get()) is not None:
            trace.system_prompts.append(text)
        return request.override(system_message=SystemMessage(content=text))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any]:
        response = await handler(self._request(request))
        return self._stamped(request, response)

    @staticmethod
    def _stamped(request: ModelRequest[Any], response: ModelResponse[Any]) -> ModelResponse[Any]:
        """The response with its final answer (an AI message without tool calls, last)
        stamped: status, citations, time, and the hand-off text when the rule replaces it."""
        if not response.result:
            return response
        last = response.result[-1]
        if not isinstance(last, AIMessage) or last.tool_calls:
            return response
        state = cast("dict[str, Any]", request.state)
        # the conversation before the answer: the rule reads the newest human message and
        # the final replies before it, never the answer itself (``stamp_for``)
        stamp = stamp_for(last, state.get("retrieved") or [], request.messages)
        metadata = {
            **last.response_metadata,
            "threadkeeper": {
                "status": stamp.status,
                "citations": stamp.citations,
                "at": datetime.now(UTC).isoformat(),
            },
        }
        update: dict[str, Any] = {"response_metadata": metadata}
        if stamp.text is not None:
            update["content"] = stamp.text
        stamped = last.model_copy(update=update)
        return ModelResponse(
            result=[*response.result[:-1], stamped],
            structured_response=response.structured_response,
        )

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        write = get_stream_writer()
        call = request.tool_call
        name = call["name"]
        write({"stage": "tool", "name": name, "status": "start"})
        started = time.perf_counter()
        status: Literal["success", "error"] = "error"
        span = tracer().start_span(
            f"execute_tool {name}",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": str(call.get("id") or ""),
            },
        )
        try:
            with otel_trace.use_span(
                span, end_on_exit=True, record_exception=False, set_status_on_exception=False
            ):
                try:
                    result = await handler(request)
                except BaseException as exc:
                    record_failure(span, exc)
                    raise
                if not (isinstance(result, ToolMessage) and result.status == "error"):
                    status = "success"
                span.set_attribute("threadkeeper.tool.status", status)
            return result
        finally:
            trace = current_trace.get()
            if trace is not None:
                trace.tools.append(
                    ToolInvocation(
                        tool=name,
                        call_id=str(call.get("id") or ""),
                        arguments_digest=arguments_digest(call.get("args", {})),
                        duration_ms=round((time.perf_counter() - started) * 1000, 3),
                        status=status,
                        at=datetime.now(UTC),
                    )
                )
            write({"stage": "tool", "name": name, "status": "end"})


def build_agent(
    *,
    model: BaseChatModel,
    tools: Sequence[BaseTool],
    knowledge: Knowledge,
    history_hooks: Sequence[AgentMiddleware[Any, Any]],
    checkpointer: BaseCheckpointSaver[Any],
    store: BaseStore,
    prompt: str = SYSTEM_PROMPT,
    model_middleware: Sequence[AgentMiddleware[Any, Any]] = (),
) -> Any:
    """The compiled agent graph (compiled once; reused for every run). ``model_middleware``
    (deadline, retries, fallback: ``app.model_calls``) wraps each model call inside the
    history hooks, so a retry sends the same window."""
    untraced_langsmith_inline()
    return create_agent(
        model,
        list(tools),
        system_prompt=prompt,
        middleware=[
            ThreadContextMiddleware(knowledge, prompt),
            *history_hooks,
            *model_middleware,
            ModelCallTracing(model, current_trace.get),  # innermost: exactly the model call
        ],
        checkpointer=checkpointer,
        store=store,
        state_schema=AgentState,
        name="threadkeeper",
    )
