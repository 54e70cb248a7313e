"""The two places a profile's transcript can live (``adapters.profile.Transcript``).

- ``CheckpointTranscript`` (embedded, postgres; ADR-0007): the checkpoint state *is* the
  record. ``GET /messages`` pages over the newest checkpoint's messages; nothing to seed.
- ``ArchiveTranscript`` (redis-mysql; the blog design): an archive (human message, final
  answer, citations) is the record and the checkpoints a cache of the recent context, which
  may be gone (a TTL, a flush, a restart) or behind (a round archived while the cache could not
  be written). Before a run such a thread is seeded from the archive's newest messages and
  latest summary (cold start).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langgraph.checkpoint.base import BaseCheckpointSaver

from threadkeeper.domain.compact import thread_order
from threadkeeper.domain.errors import UnknownThread
from threadkeeper.domain.summary import decode_summary
from threadkeeper.domain.threads import log_name
from threadkeeper.domain.transcript import (
    MAX_PAGE,
    TranscriptArchive,
    TranscriptPage,
    from_transcript,
    page_messages,
    to_transcript,
)

log = logging.getLogger(__name__)

COLD_START_MESSAGES = 20
"""A thread without current checkpoints is seeded with this many of its newest archived
messages (the blog design's 20)."""


async def thread_messages(
    saver: BaseCheckpointSaver[Any], thread_key: str, checkpoint_id: str | None = None
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


async def checkpoint_messages(
    saver: BaseCheckpointSaver[Any], thread_key: str, checkpoint_id: str | None
) -> dict[str, BaseMessage]:
    """The thread's messages at ``checkpoint_id`` by id — at the newest checkpoint where that
    one was pruned (the newest state holds every message, under the same ids)."""
    messages = await thread_messages(saver, thread_key, checkpoint_id)
    if messages is None and checkpoint_id:
        messages = await thread_messages(saver, thread_key)
    return {str(m.id): m for m in messages or []}


class CheckpointTranscript:
    """The checkpoint state is the transcript."""

    keeps_history_in_checkpoints = True

    def __init__(self, saver: BaseCheckpointSaver[Any]) -> None:
        self.saver = saver

    async def page(
        self, thread_key: str, *, limit: int, before: str | None = None
    ) -> TranscriptPage:
        messages = await thread_messages(self.saver, thread_key)
        if not messages:
            raise UnknownThread(thread_key)
        return page_messages(to_transcript(messages), limit=limit, before=before)

    async def seed(self, thread_key: str) -> dict[str, Any] | None:
        return None

    async def replay_messages(
        self, thread_key: str, checkpoint_id: str | None, ids: Sequence[str]
    ) -> dict[str, BaseMessage]:
        return await checkpoint_messages(self.saver, thread_key, checkpoint_id)

    async def message_order(self, thread_key: str) -> list[str]:
        """The thread's order (``domain.compact.thread_order``) in the newest state: it only
        grows at its end (nothing is removed from state on this kind of profile)."""
        return thread_order(await thread_messages(self.saver, thread_key) or [])


class ArchiveTranscript:
    """An archive is the transcript; the checkpoints are a cache of the recent context."""

    keeps_history_in_checkpoints = False

    def __init__(self, archive: TranscriptArchive, saver: BaseCheckpointSaver[Any]) -> None:
        self.archive = archive
        self.saver = saver

    async def page(
        self, thread_key: str, *, limit: int, before: str | None = None
    ) -> TranscriptPage:
        return await self.archive.page(thread_key, limit=limit, before=before)

    async def seed(self, thread_key: str) -> dict[str, Any] | None:
        """The archive's newest messages and latest summary for a thread with no checkpoint
        (TTL expired, Redis flushed or restarted) — or one whose checkpoint is behind the
        archive (a round archived while Redis did not answer, or whose commit's outcome was
        learnt late): it lacks the newest archived answer, and the model would never see
        that round again. Such a checkpoint is dropped first."""
        current = await thread_messages(self.saver, thread_key)
        if current is not None:
            newest = await self.archive.recent(thread_key, 1)
            if not newest or newest[-1].id in {m.id for m in current}:
                return None
            log.warning(
                "the checkpoint of %s is behind its archive: starting cold", log_name(thread_key)
            )
            await self.saver.adelete_thread(thread_key)
        recent = await self.archive.recent(thread_key, COLD_START_MESSAGES)
        if not recent:
            return None
        values: dict[str, Any] = {"messages": [from_transcript(m) for m in recent]}
        summary = decode_summary(await self.archive.latest_summary(thread_key))
        if summary is not None:
            values["summary"] = summary
        log.info("cold start of %s from %d archived messages", log_name(thread_key), len(recent))
        return values

    async def replay_messages(
        self, thread_key: str, checkpoint_id: str | None, ids: Sequence[str]
    ) -> dict[str, BaseMessage]:
        by_id = await checkpoint_messages(self.saver, thread_key, checkpoint_id)
        gone = [i for i in ids if i not in by_id]  # compacted away, or past the TTL
        for kept in await self.archive.find(thread_key, gone) if gone else []:
            by_id[kept.id] = from_transcript(kept)
        return by_id

    async def message_order(self, thread_key: str) -> list[str]:
        """The thread's order: the archive's messages (human messages and answers, which is
        ``thread_order``'s rule), oldest first; the state's order is a contiguous part of it
        (a cold start seeds the newest, compaction keeps the newest)."""
        ids: list[str] = []
        before: str | None = None
        while True:
            try:
                page = await self.archive.page(thread_key, limit=MAX_PAGE, before=before)
            except UnknownThread:
                return ids
            ids[:0] = [m.id for m in page.messages]
            if page.next_before is None:
                return ids
            before = page.next_before
