"""``AsyncRedisSaver`` that re-creates its RediSearch indexes after a Redis flush or restart.

Without persistence a restarted (or flushed) Redis has neither checkpoints nor indexes. The
saver's point reads keep working (they follow ``checkpoint_latest:*`` keys), but every search
— ``alist``, ``aprune``, ``adelete_thread`` — then fails with "no such index", so pruning stops
and Redis grows without bound. Each of those operations here re-creates the missing indexes
once (``FT.CREATE`` indexes whatever keys exist) and retries; ``ensure_indexes`` does the same
for the readiness probe.

A checkpoint is written (``_dump_checkpoint``) with its channel values — the thread's recent
messages — kept as the JSON bytes the serializer made, where the library parsed those bytes back
into dicts for redis-py to encode again (~0.35 ms of a ~88 KB checkpoint per write), when the
client encodes RedisJSON with orjson (``client.OrjsonRedis``, what the profile connects with).
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar, cast

import orjson
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    get_checkpoint_id,
)
from langgraph.checkpoint.base import CheckpointTuple as CheckpointTuple
from langgraph.checkpoint.redis.aio import AsyncRedisSaver
from langgraph.checkpoint.redis.base import aexpire_with_retry
from langgraph.checkpoint.redis.util import (
    EMPTY_ID_SENTINEL,
    from_storage_safe_id,
    from_storage_safe_str,
    to_storage_safe_id,
    to_storage_safe_str,
)
from redis.exceptions import ResponseError
from redisvl.exceptions import RedisSearchError  # type: ignore[import-untyped]
from redisvl.query import FilterQuery  # type: ignore[import-untyped]
from redisvl.query.filter import Tag  # type: ignore[import-untyped]

from threadkeeper.adapters.redis_mysql.client import OrjsonRedis
from threadkeeper.adapters.redis_mysql.serde import MemoRedisSerializer, is_envelope
from threadkeeper.adapters.serde import reading, thread_of
from threadkeeper.domain.errors import StoredDataRefused

log = logging.getLogger(__name__)

T = TypeVar("T")


def _missing_index(exc: BaseException) -> bool:
    return "no such index" in str(exc).lower() or "unknown index" in str(exc).lower()


def _already_exists(exc: BaseException) -> bool:
    return "already exists" in str(exc).lower()


class HealingRedisSaver(AsyncRedisSaver):
    """The Redis saver threadkeeper configures (TTL refreshed on read), self-healing indexes.

    Index creation is check-then-``FT.CREATE``: replicas starting (or healing) at the same
    moment race, and the loser's "Index already exists" means the index is there — success.
    Messages are (de)serialized through a memo (``MemoRedisSerializer``), which reads only the
    types threadkeeper stores: a read that meets anything else raises ``StoredDataRefused``
    (named for its thread and logged, ``serde.reading``), never a checkpoint without it.
    """

    serde: MemoRedisSerializer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.serde = MemoRedisSerializer()

    def _recursive_deserialize(self, obj: Any) -> Any:
        """The library's walk over a checkpoint's channel values, except that a refused
        envelope raises: the library logs any failure to revive an envelope and hands the
        envelope back as a dict (kept for other failures, as the library has them)."""
        if isinstance(obj, dict) and is_envelope(obj):
            try:
                return self.serde._revive_if_needed(obj)
            except StoredDataRefused:
                raise
            except Exception:
                pass  # the library's own handling below: logged, handed back as it is
        return super()._recursive_deserialize(obj)

    async def asetup(self) -> None:
        for _ in range(3):
            try:
                await super().asetup()
                return
            except (RedisSearchError, ResponseError) as exc:
                if not _already_exists(exc):
                    raise
                # another replica created it between the check and FT.CREATE: check again
        await super().asetup()

    async def ensure_indexes(self) -> bool:
        """Create whichever index is missing; ``True`` if one had to be created."""
        existing = {
            (name.decode() if isinstance(name, bytes) else str(name))
            for name in await self._redis.execute_command("FT._LIST")
        }
        created = False
        for index in (self.checkpoints_index, self.checkpoint_writes_index):
            if index.name not in existing:
                try:
                    await index.create(overwrite=False)
                except (RedisSearchError, ResponseError) as exc:
                    if not _already_exists(exc):
                        raise
                    continue  # created by someone else a moment ago
                created = True
        if created:
            log.warning("Redis had lost the checkpoint indexes (flush or restart): re-created")
        return created

    async def _healing(self, call: Callable[[], Awaitable[T]]) -> T:
        try:
            return await call()
        except (RedisSearchError, ResponseError) as exc:
            if not _missing_index(exc):
                raise
            await self.ensure_indexes()
            return await call()

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        with reading(thread_of(config)):
            return await self._healing(lambda: self._read_tuple(config))

    async def _read_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """``AsyncRedisSaver.aget_tuple`` (langgraph-checkpoint-redis 0.5.2) reading the
        checkpoint's document once and parsing it once.

        The library fetches the document whole (``JSON.GET``), re-encodes its checkpoint to a
        string and parses that again, fetches the checkpoint a second time for its channel
        values (``JSON.GET $.checkpoint``), and parses the string once more in
        ``_load_checkpoint``: four parses and an encode of the thread's recent messages (~150 KB
        of JSON at the ~156 messages the default budget keeps) per read. Here one ``JSON.GET``
        is parsed once with orjson; the rest — the TTL refresh, pending sends and writes, the
        metadata and the tuple — is the library's, in its order, through its own helpers (the
        saver conformance suite pins the result), except that the refresh's ``EXPIRE`` commands go
        in one pipelined round trip (``_refresh``), not one each."""
        configurable = config["configurable"]
        thread_id = configurable["thread_id"]
        checkpoint_ns = configurable.get("checkpoint_ns", "")
        checkpoint_id = get_checkpoint_id(config)
        by_id = bool(checkpoint_id) and checkpoint_id != EMPTY_ID_SENTINEL
        safe_thread_id = to_storage_safe_id(thread_id)
        safe_ns = to_storage_safe_str(checkpoint_ns)
        if by_id:
            safe_id = to_storage_safe_id(str(checkpoint_id))
            key: Any = self._make_redis_checkpoint_key(safe_thread_id, safe_ns, safe_id)
        else:
            key = await self._redis.get(
                self._make_redis_checkpoint_latest_key(thread_id, checkpoint_ns)
            )
            if not key:
                return None  # no pointer: no checkpoint
        refresh = bool(self.ttl_config and self.ttl_config.get("refresh_on_read"))
        pipeline = self._redis.pipeline(transaction=False)
        pipeline.execute_command("JSON.GET", key)
        if refresh:
            pipeline.ttl(key)
        results = await pipeline.execute()
        if not results[0]:
            return None  # gone (or a pointer to a missing checkpoint)
        raw = results[0]
        # parsed by redis-py once its JSON commands have registered their decoder on the
        # client (any ``.json()`` call does); raw bytes before that
        document = orjson.loads(raw) if isinstance(raw, bytes | str) else raw
        if by_id:
            found_id = document.get("checkpoint_id", safe_id)
            parent_id = document.get("parent_checkpoint_id", safe_id)
        else:
            found_id = document.get("checkpoint_id")
            parent_id = document.get("parent_checkpoint_id")
        doc_thread_id = from_storage_safe_id(document.get("thread_id", safe_thread_id))
        doc_ns = from_storage_safe_str(document.get("checkpoint_ns", safe_ns))
        doc_checkpoint_id = from_storage_safe_id(found_id)
        doc_parent_id = from_storage_safe_id(parent_id)

        if refresh and results[1] > 0:  # -2: gone, -1: no expiry, 0: expired
            await self._refresh(key, doc_thread_id, doc_ns, doc_checkpoint_id, pointer=not by_id)

        checkpoint = document.get("checkpoint") or {}
        pending_writes_load = self._aload_pending_writes(
            thread_id, checkpoint_ns, doc_checkpoint_id
        )
        if doc_parent_id:
            pending_sends, pending_writes = await asyncio.gather(
                self._aload_pending_sends(
                    thread_id=thread_id, checkpoint_ns=doc_ns, parent_checkpoint_id=doc_parent_id
                ),
                pending_writes_load,
            )
        else:
            pending_sends, pending_writes = [], await pending_writes_load
        channel_values = self._recursive_deserialize(checkpoint.get("channel_values", {}))

        raw_metadata = document.get("metadata", "{}")
        metadata = json.loads(raw_metadata) if isinstance(raw_metadata, str) else raw_metadata
        clean = {
            k.replace("\u0000", ""): v.replace("\u0000", "") if isinstance(v, str) else v
            for k, v in metadata.items()
        }
        parent_config: RunnableConfig | None = None
        if doc_parent_id:
            parent_config = {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": checkpoint_ns,
                    "checkpoint_id": doc_parent_id,
                }
            }
        return CheckpointTuple(
            config={
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": checkpoint_ns,
                    "checkpoint_id": doc_checkpoint_id,
                }
            },
            checkpoint=self._load_checkpoint(checkpoint, channel_values, pending_sends),
            metadata=cast(CheckpointMetadata, clean),
            parent_config=parent_config,
            pending_writes=pending_writes,
        )

    async def _refresh(
        self, key: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str, *, pointer: bool
    ) -> None:
        """The library's TTL refresh on read of the checkpoint at ``key``: it, its writes, its
        latest pointer (when the read followed it) and its writes' registry get the whole TTL
        again — their ``EXPIRE`` commands, in the library's order, in one round trip."""
        write_keys: list[str] = []
        if self._key_registry:
            write_keys = await self._key_registry.get_write_keys(
                thread_id, checkpoint_ns, checkpoint_id
            )
        if pointer:  # keep the pointer's TTL with the checkpoint it points to
            write_keys.append(self._make_redis_checkpoint_latest_key(thread_id, checkpoint_ns))
        ttl_minutes = (self.ttl_config or {}).get("default_ttl")
        if ttl_minutes is None or ttl_minutes <= 0:  # none, or -1 (persist): the library's way
            await self._apply_ttl_to_keys(key, write_keys or None)
            if self._key_registry and ttl_minutes is not None:
                await self._key_registry.apply_ttl(
                    thread_id, checkpoint_ns, checkpoint_id, int(ttl_minutes * 60)
                )
            return
        keys = [key, *write_keys]
        if self._key_registry:
            keys.append(
                self._key_registry.make_write_keys_zset_key(thread_id, checkpoint_ns, checkpoint_id)
            )
        await self._expire_all(keys, int(ttl_minutes * 60))

    async def _expire_all(self, keys: list[str], ttl_seconds: int) -> None:
        """``EXPIRE`` each of ``keys``, best effort, as the library's read does — the
        checkpoint, its writes, its pointer, its writes' registry — but in one pipelined round
        trip where the library made one per key; a key whose ``EXPIRE`` failed (or all, if the
        pipeline did) is retried on its own (``aexpire_with_retry``, which never raises)."""
        pipeline = self._redis.pipeline(transaction=False)
        for key in keys:
            pipeline.expire(key, ttl_seconds)
        try:
            answers = await pipeline.execute(raise_on_error=False)
        except Exception:
            answers = [None] * len(keys)
        for key, answer in zip(keys, answers, strict=True):
            if answer is None or isinstance(answer, Exception):
                await aexpire_with_retry(self._redis, key, ttl_seconds)

    def _dump_checkpoint(self, checkpoint: Checkpoint) -> dict[str, Any]:
        """``BaseRedisSaver._dump_checkpoint``'s document with its ``channel_values`` left as
        the serializer's bytes (an ``orjson.Fragment``, which the client's orjson encoder
        writes as they are): the same JSON value, without parsing the thread's messages into
        dicts to encode them again. The rest of the checkpoint is small and goes the
        library's way: parsed, ``channel_versions`` made strings. Anything the JSON path
        cannot carry (bytes: the serializer's msgpack fallback), and a client that encodes
        with the standard library's ``json`` (no fragments), is the library's whole."""
        if not isinstance(self._redis, OrjsonRedis) or not isinstance(
            checkpoint.get("channel_values"), dict
        ):
            return super()._dump_checkpoint(checkpoint)
        rest = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        values_type, values = self.serde.dumps_typed(checkpoint["channel_values"])
        rest_type, head = self.serde.dumps_typed(rest)
        if values_type != "json" or rest_type != "json":
            return super()._dump_checkpoint(checkpoint)
        parsed = orjson.loads(head)
        data: dict[str, Any] = {}
        for key in checkpoint:  # the checkpoint's order, as the library's document has it
            data[key] = orjson.Fragment(values) if key == "channel_values" else parsed[key]
        if "channel_versions" in data:
            data["channel_versions"] = {k: str(v) for k, v in data["channel_versions"].items()}
        return {"type": "json", **data, "pending_sends": []}

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
        stream_mode: str = "values",
    ) -> RunnableConfig:
        return await self._healing(
            lambda: super(HealingRedisSaver, self).aput(
                config, checkpoint, metadata, new_versions, stream_mode
            )
        )

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._healing(
            lambda: super(HealingRedisSaver, self).aput_writes(config, writes, task_id, task_path)
        )

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        parent = AsyncRedisSaver
        with reading(thread_of(config)):
            try:
                items = [
                    item
                    async for item in parent.alist(
                        self, config, filter=filter, before=before, limit=limit
                    )
                ]
            except (RedisSearchError, ResponseError) as exc:
                if not _missing_index(exc):
                    raise
                await self.ensure_indexes()
                items = [
                    item
                    async for item in parent.alist(
                        self, config, filter=filter, before=before, limit=limit
                    )
                ]
        for item in items:
            yield item

    async def adelete_thread(self, thread_id: str) -> None:
        await self._healing(lambda: super(HealingRedisSaver, self).adelete_thread(thread_id))

    async def aprune(
        self,
        thread_ids: Sequence[str],
        *,
        strategy: str = "keep_latest",
        keep_last: int | None = None,
        max_results: int = 10000,
    ) -> None:
        """The library's ``aprune``, weighing only each thread's own checkpoints.

        RediSearch matches a TAG without regard to case, so the library's search for
        ``acme:alice:t`` also returns ``acme:Alice:t``'s checkpoints; it sorted them with
        alice's, kept the newest — possibly Alice's — and evicted alice's own head (issue 26).
        Here the documents found are kept only where their ``thread_id`` is the thread's,
        exactly, before anything is weighed or deleted."""
        if keep_last is None:
            keep_last = 0 if strategy == "delete" else 1
        if keep_last < 0:
            raise ValueError(f"``keep_last`` must be >= 0, got {keep_last}")
        for thread_id in thread_ids:
            await self._healing(functools.partial(self._prune, thread_id, keep_last, max_results))

    async def _own(self, index: Any, safe: str, fields: list[str], limit: int) -> list[Any]:
        """The documents of ``index`` whose ``thread_id`` is ``safe`` — exactly, not as the
        case-blind TAG match found them."""
        found = await index.search(
            FilterQuery(
                filter_expression=Tag("thread_id") == safe,
                return_fields=["thread_id", *fields],
                num_results=limit,
            )
        )
        return [doc for doc in found.docs if getattr(doc, "thread_id", None) == safe]

    async def _prune(self, thread_id: str, keep_last: int, limit: int) -> None:
        safe = to_storage_safe_id(thread_id)
        docs = await self._own(
            self.checkpoints_index, safe, ["checkpoint_ns", "checkpoint_id"], limit
        )
        by_ns: dict[str, list[str]] = {}
        for doc in docs:
            by_ns.setdefault(getattr(doc, "checkpoint_ns", ""), []).append(
                getattr(doc, "checkpoint_id", "")
            )
        evicted_ids = {
            namespace: sorted(ids, reverse=True)[keep_last:]  # ids sort in time order
            for namespace, ids in by_ns.items()
        }
        gone = {checkpoint_id for ids in evicted_ids.values() for checkpoint_id in ids}
        if not gone:
            return
        writes = await self._own(
            self.checkpoint_writes_index,
            safe,
            ["checkpoint_ns", "checkpoint_id", "task_id", "idx"],
            limit,
        )
        keys = [
            self._make_redis_checkpoint_writes_key(
                safe,
                getattr(w, "checkpoint_ns", ""),
                getattr(w, "checkpoint_id", ""),
                getattr(w, "task_id", ""),
                int(getattr(w, "idx", 0)),
            )
            for w in writes
            if getattr(w, "checkpoint_id", None) in gone
        ]
        for namespace, ids in by_ns.items():
            evicted = evicted_ids[namespace]
            for checkpoint_id in evicted:
                keys.append(self._make_redis_checkpoint_key(safe, namespace, checkpoint_id))
                if self._key_registry:
                    keys.append(
                        self._key_registry.make_write_keys_zset_key(
                            thread_id, namespace, checkpoint_id
                        )
                    )
            if len(evicted) == len(ids):
                keys.append(
                    self._make_redis_checkpoint_latest_key(
                        thread_id, from_storage_safe_str(namespace)
                    )
                )
        pipeline = self._redis.pipeline(transaction=False)
        for key in keys:
            pipeline.delete(key)
        await pipeline.execute()

    async def thread_keys(self, thread_id: str) -> list[str]:
        """The Redis keys that hold the thread: its checkpoints and their latest pointers, its
        writes and their registry sets (a checkpoint's set exists only once it has writes:
        the name is listed either way), found as ``adelete_thread`` finds them — through the
        checkpoint and write indexes by the thread's tag (no ``SCAN`` of the keyspace)."""
        return await self._healing(lambda: self._thread_keys(thread_id))

    async def _thread_keys(self, thread_id: str) -> list[str]:
        safe = to_storage_safe_id(thread_id)
        checkpoints = await self.checkpoints_index.search(
            FilterQuery(
                filter_expression=Tag("thread_id") == safe,
                return_fields=["checkpoint_ns", "checkpoint_id"],
                num_results=10000,
            )
        )
        keys: list[str] = []
        namespaces: set[str] = set()
        for doc in checkpoints.docs:
            namespace = getattr(doc, "checkpoint_ns", "")
            checkpoint_id = getattr(doc, "checkpoint_id", "")
            namespaces.add(namespace)
            keys.append(self._make_redis_checkpoint_key(safe, namespace, checkpoint_id))
            if self._key_registry:
                keys.append(
                    self._key_registry.make_write_keys_zset_key(thread_id, namespace, checkpoint_id)
                )
        keys.extend(
            self._make_redis_checkpoint_latest_key(thread_id, from_storage_safe_str(namespace))
            for namespace in sorted(namespaces)
        )
        writes = await self.checkpoint_writes_index.search(
            FilterQuery(
                filter_expression=Tag("thread_id") == safe,
                return_fields=["checkpoint_ns", "checkpoint_id", "task_id", "idx"],
                num_results=10000,
            )
        )
        keys.extend(
            self._make_redis_checkpoint_writes_key(
                safe,
                getattr(doc, "checkpoint_ns", ""),
                getattr(doc, "checkpoint_id", ""),
                getattr(doc, "task_id", ""),
                int(getattr(doc, "idx", 0)),
            )
            for doc in writes.docs
        )
        return list(dict.fromkeys(keys))

    async def existing_keys(self, thread_id: str) -> list[str]:
        """Those of ``thread_keys`` that exist, and the thread's latest-checkpoint pointer
        if it does (found without the index: an erasure's verification)."""
        keys = [
            *await self.thread_keys(thread_id),
            self._make_redis_checkpoint_latest_key(thread_id, ""),
        ]
        pipeline = self._redis.pipeline(transaction=False)
        for key in keys:
            pipeline.exists(key)
        found = await pipeline.execute()
        return [key for key, exists in zip(keys, found, strict=True) if exists]

    async def thread_bytes(self, thread_id: str) -> tuple[int, int]:
        """(keys, bytes) the thread holds in Redis: ``MEMORY USAGE key SAMPLES 0`` (the whole
        value with the key and Redis's own overhead) summed over ``thread_keys`` that exist,
        in one pipeline."""
        keys = await self.thread_keys(thread_id)
        if not keys:
            return 0, 0
        pipeline = self._redis.pipeline(transaction=False)
        for key in keys:
            pipeline.memory_usage(key, samples=0)
        sizes = [int(size) for size in await pipeline.execute() if size is not None]
        return len(sizes), sum(sizes)
