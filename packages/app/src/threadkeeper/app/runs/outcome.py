"""A finished graph's state read as the run's outcome: the answer, its status and usage, the
hand-off context of an escalation, the run record and the round the transcript keeps."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from threadkeeper.app.agent import PROMPT_VERSION, RunTrace
from threadkeeper.app.service import AnswerOut, CitationOut, RunResultOut, UsageOut
from threadkeeper.domain.compact import encode_window, in_order, order_since
from threadkeeper.domain.memory import MemoryKind
from threadkeeper.domain.runs import ModelCall, RunRecord, content_digest, stored_prompt
from threadkeeper.domain.summary import Summary, encode_summary
from threadkeeper.domain.threads import ThreadRef
from threadkeeper.domain.tokens import MESSAGE_FRAMING, TokenCounter, message_text
from threadkeeper.domain.transcript import Round, TranscriptMessage, stamp_of, to_transcript

RECENT_FOR_HANDOFF = 6
"""An escalation hands over this many of the thread's newest messages."""


def now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Finished:
    """What one finished run stores and answers."""

    outcome: RunResultOut
    record: RunRecord
    round: Round


def usage(
    counter: TokenCounter, human: HumanMessage, produced: Sequence[BaseMessage], trace: RunTrace
) -> UsageOut:
    """Token usage of the run's model calls: the provider's figures when it reported them for
    every call (``source: "provider"``), otherwise threadkeeper's count with the configured
    tokenizer — input as each call's window was counted, output as the replies' text and tool
    calls count (``source: "counted"``)."""
    replies = [m for m in produced if isinstance(m, AIMessage)]
    reported = [m.usage_metadata for m in replies if m.usage_metadata]
    if replies and len(reported) == len(replies):
        return UsageOut(
            input_tokens=sum(u["input_tokens"] for u in reported),
            output_tokens=sum(u["output_tokens"] for u in reported),
            source="provider",
        )
    inputs = sum(w.tokens for w in trace.windows) or counter.count(human)
    outputs = sum(max(0, counter.count(m) - MESSAGE_FRAMING) for m in replies)
    return UsageOut(input_tokens=inputs, output_tokens=outputs, source="counted")


def handoff_context(
    values: dict[str, Any], messages: Sequence[BaseMessage], trace: RunTrace
) -> dict[str, Any]:
    """What a person taking over an escalated thread is given."""
    summary = Summary.from_state(values.get("summary"))
    recent = to_transcript(messages)[-RECENT_FOR_HANDOFF:]
    return {
        "conversation_summary": summary.text if summary else "",
        "profile": [
            {"key": m["key"], "value": m["value"]}
            for m in trace.memory
            if m["kind"] == MemoryKind.PROFILE.value
        ],
        "recent_messages": [{"id": m.id, "role": m.role, "content": m.content} for m in recent],
    }


def finish(
    *,
    run_id: str,
    ref: ThreadRef,
    human: HumanMessage,
    given_id: str | None,
    values: dict[str, Any],
    trace: RunTrace,
    counter: TokenCounter,
    prompt: str,
) -> Finished:
    """The outcome, run record and round of a run whose graph ended in state ``values``.

    Raises:
        RuntimeError: the graph ended without an answer.
    """
    messages: list[BaseMessage] = values.get("messages", [])
    start = next(i for i in range(len(messages) - 1, -1, -1) if messages[i].id == human.id)
    produced = messages[start + 1 :]
    answer = next(
        (m for m in reversed(produced) if isinstance(m, AIMessage) and not m.tool_calls), None
    )
    if answer is None:
        raise RuntimeError("the agent ended without an answer")
    meta = stamp_of(answer)
    status = meta.get("status", "answered")
    outcome = RunResultOut(
        run_id=run_id,
        thread_id=ref.thread_id,
        status=status,
        message=AnswerOut(
            id=str(answer.id),
            role="ai",
            content=message_text(answer),
            citations=[msgspec.convert(c, CitationOut) for c in meta.get("citations", [])],
        ),
        usage=usage(counter, human, produced, trace),
        handoff_context=handoff_context(values, messages, trace) if status == "escalate" else None,
    )
    memory = trace.memory
    # the windows' ids in the order, found on the window messages themselves (``in_order``
    # reads only the message): the order is read back only as far as the oldest of them
    order = order_since(
        messages,
        {str(m.id) for w in trace.windows for m in w.messages if in_order(m)},
        str(human.id),
    )
    record = RunRecord(
        run_id=run_id,
        thread_key=ref.key,
        tenant_id=ref.tenant_id,
        user_id=ref.user_id,
        thread_id=ref.thread_id,
        human_message_id=str(human.id),
        status=status,
        created_at=now(),
        response=msgspec.to_builtins(outcome),
        system_prompt=stored_prompt(trace.system_prompts[0] if trace.system_prompts else prompt),
        prompt_version=PROMPT_VERSION,
        chunk_ids=tuple(c["chunk_id"] for c in trace.retrieved),
        memory_keys=tuple(f"{m['kind']}/{m['key']}@{m['updated_at']}" for m in memory),
        model_calls=tuple(
            ModelCall(
                (),
                w.summary,
                w.tokens,
                w.budget,
                w.counter,
                window=encode_window([str(m.id) for m in w.messages], order, str(human.id)),
            )
            for w in trace.windows
        ),
        content_digest=content_digest(message_text(human)),
        message_id_given=given_id is not None,
    )
    human_text = to_transcript([human])[0]
    answer_text = to_transcript([answer]) or [
        TranscriptMessage(str(answer.id), "ai", "", human_text.created_at)
    ]
    round_ = Round(
        run_id=run_id,
        thread_key=ref.key,
        tenant_id=ref.tenant_id,
        user_id=ref.user_id,
        thread_id=ref.thread_id,
        human=human_text,
        ai=answer_text[0],
        summary=encode_summary(values.get("summary")),
    )
    return Finished(outcome, record, round_)
