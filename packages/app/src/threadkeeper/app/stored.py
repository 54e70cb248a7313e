"""What the service stored, read back: transcripts, archived messages, memory.

Used by the run service and by the commands that only read (``replay``, ``export``,
``doctor``, ``retention --dry-run``), which must not build the agent (LangChain's agent
factory, the model and the hooks are most of a command's start-up): this module imports
message types and the domain, nothing heavier.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from threadkeeper.app.service import MemoryEntry, MemoryView
from threadkeeper.domain.errors import UnknownThread
from threadkeeper.domain.memory import MemoryKind, memory_namespace
from threadkeeper.domain.summary import Summary
from threadkeeper.domain.tokens import message_text
from threadkeeper.domain.transcript import (
    Citation,
    TranscriptArchive,
    TranscriptMessage,
    TranscriptPage,
    page_messages,
)

if TYPE_CHECKING:
    from langgraph.store.base import BaseStore


def stamp_of(message: BaseMessage) -> dict[str, Any]:
    """What the agent stamped on a message (``response_metadata["threadkeeper"]``)."""
    value = message.response_metadata.get("threadkeeper")
    return value if isinstance(value, dict) else {}


def to_transcript(messages: Sequence[BaseMessage]) -> list[TranscriptMessage]:
    """Human messages and AI messages with text, as ``GET /messages`` serves them."""
    out: list[TranscriptMessage] = []
    for message in messages:
        text = message_text(message)
        meta = stamp_of(message)
        at = datetime.fromisoformat(meta["at"]) if "at" in meta else datetime.fromtimestamp(0, UTC)
        if isinstance(message, HumanMessage):
            out.append(TranscriptMessage(str(message.id), "human", text, at))
        elif isinstance(message, AIMessage) and text.strip():
            citations = tuple(
                Citation(c["chunk_id"], c["doc_id"], c["title"]) for c in meta.get("citations", [])
            )
            status = meta.get("status")
            out.append(
                TranscriptMessage(
                    str(message.id), "ai", text, at, citations, str(status) if status else None
                )
            )
    return out


def from_transcript(message: TranscriptMessage) -> BaseMessage:
    """An archived message back as a chat message (cold start), ids, citations and the
    answer's status kept (the escalation rule counts clarifications by it)."""
    meta: dict[str, Any] = {"at": message.created_at.isoformat(), "restored": True}
    if message.role == "human":
        return HumanMessage(
            message.content, id=message.id, response_metadata={"threadkeeper": meta}
        )
    meta["citations"] = [msgspec.structs.asdict(c) for c in message.citations]
    if message.status:
        meta["status"] = message.status
    return AIMessage(message.content, id=message.id, response_metadata={"threadkeeper": meta})


def encode_summary(value: Any) -> str | None:
    summary = Summary.from_state(value)
    return None if summary is None else msgspec.json.encode(summary.to_state()).decode()


def decode_summary(text: str | None) -> dict[str, Any] | None:
    if not text:
        return None
    state = msgspec.json.decode(text)
    summary = Summary.from_state(state) if isinstance(state, dict) else None
    return None if summary is None else summary.to_state()


async def thread_messages(
    saver: Any, thread_key: str, checkpoint_id: str | None = None
) -> list[BaseMessage] | None:
    """The thread's messages at ``checkpoint_id`` (default: the newest checkpoint), read
    through the saver as the agent's graph reads them; ``None``: no such checkpoint."""
    configurable: dict[str, Any] = {"thread_id": thread_key, "checkpoint_ns": ""}
    if checkpoint_id:
        configurable["checkpoint_id"] = checkpoint_id
    found = await saver.aget_tuple({"configurable": configurable})
    if found is None:
        return None
    return list(found.checkpoint.get("channel_values", {}).get("messages") or [])


async def transcript_page(
    saver: Any,
    archive: TranscriptArchive | None,
    thread_key: str,
    *,
    limit: int,
    before: str | None,
) -> TranscriptPage:
    """One page of the thread's transcript: from the archive where the profile has one,
    else from the checkpoint state.

    Raises:
        UnknownThread: no such thread (its key in the message).
        UnknownMessage: ``before`` is not in it.
    """
    if archive is not None:
        return await archive.page(thread_key, limit=limit, before=before)
    messages = await thread_messages(saver, thread_key)
    if not messages:
        raise UnknownThread(thread_key)
    return page_messages(to_transcript(messages), limit=limit, before=before)


async def load_memory(store: BaseStore, tenant_id: str, user_id: str) -> list[dict[str, Any]]:
    """The user's memory items (``kind``, ``key``, ``value``, ``source``, ``updated_at``)."""
    items: list[dict[str, Any]] = []
    for kind in (MemoryKind.PROFILE, MemoryKind.FACTS):
        for item in await store.asearch(memory_namespace(tenant_id, user_id, kind), limit=500):
            items.append(
                {
                    "kind": kind.value,
                    "key": item.key,
                    "value": str(item.value.get("value", "")),
                    "source": item.value.get("source", {}),
                    "updated_at": item.updated_at.isoformat(),
                }
            )
    return items


async def memory_view(store: BaseStore, tenant_id: str, user_id: str) -> MemoryView:
    """The user's memory as ``GET /v1/users/{user_id}/memory`` serves it."""
    items = await load_memory(store, tenant_id, user_id)

    def entries(kind: MemoryKind) -> list[MemoryEntry]:
        return [
            MemoryEntry(m["key"], m["value"], dict(m["source"]))
            for m in items
            if m["kind"] == kind.value
        ]

    return MemoryView(profile=entries(MemoryKind.PROFILE), facts=entries(MemoryKind.FACTS))
