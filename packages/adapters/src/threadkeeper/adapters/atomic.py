"""Atomic runs over any LangGraph saver: a run's checkpoint writes are staged and reach the
real saver only when the run commits.

LangGraph persists on exit even when a run fails or is cancelled (checked here with
``durability="exit"``: a cancelled run leaves its human message in the thread). threadkeeper
promises the opposite — a run that does not finish leaves the thread exactly as it was — so
the compiled graph's checkpointer is an ``AtomicSaver``: inside ``staging(thread_id)`` every
``aput``/``aput_writes`` for that thread goes to an in-memory log, reads see the log on top of
the real saver, and ``commit()`` replays the log, in order, into the real saver. A run that
ends any other way just drops its log. What the real saver answers for the thread is read
once per staging (``Staging.read``): the thread is the run's until it commits.

The staging is carried by a ``ContextVar``: the graph is compiled once, and LangGraph's tasks
inherit the run task's context. A context outlives its run wherever something captured it — a
connection opened during the run (a Redis or MySQL pool's, opened on first use) keeps the
context of its opening in its socket's reader callback for as long as it lives — so the
staging is emptied when its round ends (``Staging.release``): no run's messages stay behind
in a pooled connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    copy_checkpoint,
)


@dataclass(slots=True)
class StagedPut:
    config: RunnableConfig
    checkpoint: Checkpoint
    metadata: CheckpointMetadata
    new_versions: ChannelVersions


@dataclass(slots=True)
class StagedWrites:
    config: RunnableConfig
    writes: list[tuple[str, Any]]
    task_id: str
    task_path: str


class StagedSink(Protocol):
    """Where a round's staged writes are replayed (``Staging.replay``): each profile's round
    store is one, writing them as it stores them."""

    async def put(self, op: StagedPut) -> None:
        """A checkpoint (``aput``'s arguments)."""
        ...

    async def put_writes(self, op: StagedWrites) -> None:
        """A task's pending writes (``aput_writes``' arguments)."""
        ...


class SaverSink:
    """Replays into a LangGraph saver as it is: ``aput`` and ``aput_writes``, in order.
    ``last``: the config ``aput`` returned for the newest checkpoint."""

    def __init__(self, saver: BaseCheckpointSaver[Any]) -> None:
        self.saver = saver
        self.last: RunnableConfig | None = None

    async def put(self, op: StagedPut) -> None:
        self.last = await self.saver.aput(op.config, op.checkpoint, op.metadata, op.new_versions)

    async def put_writes(self, op: StagedWrites) -> None:
        await self.saver.aput_writes(op.config, op.writes, op.task_id, op.task_path)


@dataclass(slots=True)
class Staging:
    """The uncommitted checkpoint writes of one run on one thread."""

    thread_id: str
    log: list[StagedPut | StagedWrites] = field(default_factory=list)
    checkpoints: dict[str, tuple[RunnableConfig, StagedPut]] = field(default_factory=dict)
    writes: dict[str, list[tuple[str, str, Any]]] = field(default_factory=dict)
    latest: str | None = None
    committed: bool = False
    read: dict[tuple[str, str], CheckpointTuple | None] = field(default_factory=dict)
    """What the real saver answered for this thread, by (namespace, checkpoint id or "" for
    the newest): the thread is the round's until it commits, so the real saver's answer
    cannot change in between, and it is read once (the cold-start check and the graph's own
    read were two reads and two decodings of the whole checkpoint)."""

    def owns(self, config: RunnableConfig) -> bool:
        return bool(config.get("configurable", {}).get("thread_id") == self.thread_id)

    async def replay(self, sink: StagedSink) -> None:
        """The staged writes into ``sink``, in the order the graph made them: the one place
        a round's writes are replayed (every round store, ``AtomicSaver.commit``)."""
        for op in self.log:
            if isinstance(op, StagedPut):
                await sink.put(op)
            else:
                await sink.put_writes(op)

    def release(self) -> None:
        """Drop what was staged (the round is over: committed, or dropped with its run)."""
        self.log = []
        self.checkpoints = {}
        self.writes = {}
        self.read = {}
        self.latest = None


_current: ContextVar[Staging | None] = ContextVar("threadkeeper_staging", default=None)


def _checkpoint_id(config: RunnableConfig) -> str | None:
    value = config.get("configurable", {}).get("checkpoint_id")
    return str(value) if value is not None else None


class AtomicSaver(BaseCheckpointSaver[Any]):
    """Wraps a real saver; see the module docstring. Async API only."""

    def __init__(self, base: BaseCheckpointSaver[Any]) -> None:
        super().__init__(serde=base.serde)
        self.base = base

    @contextmanager
    def staging(self, thread_id: str) -> Iterator[Staging]:
        """Stage this context's checkpoint writes for ``thread_id`` until ``commit``."""
        staging = Staging(thread_id)
        token = _current.set(staging)
        try:
            yield staging
        finally:
            _current.reset(token)
            staging.release()

    async def commit(self, staging: Staging) -> RunnableConfig | None:
        """Replay the staged writes into the real saver, in order; the last checkpoint's config."""
        if staging.committed:
            raise RuntimeError("staging already committed")
        staging.committed = True
        sink = SaverSink(self.base)
        await staging.replay(sink)
        return sink.last

    def _active(self, config: RunnableConfig) -> Staging | None:
        staging = _current.get()
        if staging is not None and not staging.committed and staging.owns(config):
            return staging
        return None

    # -- reads ------------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        staging = self._active(config)
        if staging is None:
            return await self.base.aget_tuple(config)
        wanted = _checkpoint_id(config) or staging.latest
        if wanted is not None and wanted in staging.checkpoints:
            stored_config, put = staging.checkpoints[wanted]
            parent = put.config if _checkpoint_id(put.config) else None
            return CheckpointTuple(
                config=stored_config,
                checkpoint=copy_checkpoint(put.checkpoint),
                metadata=put.metadata,
                parent_config=parent,
                pending_writes=list(staging.writes.get(wanted, [])),
            )
        configurable = config.get("configurable", {})
        key = (str(configurable.get("checkpoint_ns", "")), _checkpoint_id(config) or "")
        if key in staging.read:
            found = staging.read[key]
            if found is not None:  # a copy, as LangGraph's own savers hand out
                found = found._replace(
                    checkpoint=copy_checkpoint(found.checkpoint),
                    pending_writes=list(found.pending_writes or []),
                )
        else:
            found = staging.read[key] = await self.base.aget_tuple(config)
            if found is not None:
                staging.read[key] = found._replace(
                    checkpoint=copy_checkpoint(found.checkpoint),
                    pending_writes=list(found.pending_writes or []),
                )
        if found is None:
            return None
        extra = staging.writes.get(_checkpoint_id(found.config) or "")
        if extra:
            found = found._replace(pending_writes=[*(found.pending_writes or []), *extra])
        return found

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        async for item in self.base.alist(config, filter=filter, before=before, limit=limit):
            yield item

    # -- writes -----------------------------------------------------------------------------

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        staging = self._active(config)
        if staging is None:
            return await self.base.aput(config, checkpoint, metadata, new_versions)
        put = StagedPut(config, copy_checkpoint(checkpoint), metadata, dict(new_versions))
        configurable = config.get("configurable", {})
        stored: RunnableConfig = {
            "configurable": {
                "thread_id": configurable["thread_id"],
                "checkpoint_ns": configurable.get("checkpoint_ns", ""),
                "checkpoint_id": checkpoint["id"],
            }
        }
        staging.log.append(put)
        staging.checkpoints[checkpoint["id"]] = (stored, put)
        staging.latest = checkpoint["id"]
        return stored

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        staging = self._active(config)
        if staging is None:
            await self.base.aput_writes(config, writes, task_id, task_path)
            return
        staging.log.append(StagedWrites(config, list(writes), task_id, task_path))
        bucket = staging.writes.setdefault(_checkpoint_id(config) or "", [])
        bucket.extend((task_id, channel, value) for channel, value in writes)

    # -- everything else goes to the real saver ---------------------------------------------

    async def adelete_thread(self, thread_id: str) -> None:
        staging = _current.get()
        if staging is not None and staging.thread_id == thread_id:
            staging.read.clear()  # what was read of the thread is gone
        await self.base.adelete_thread(thread_id)

    def get_next_version(self, current: Any, channel: None = None) -> Any:
        return self.base.get_next_version(current, channel)
