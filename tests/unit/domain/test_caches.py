"""``domain.caches`` (issue 26, item 11): the domain's caches of message objects and texts —
``IdentityMemo``, ``SliceSums``, ``TurnIndexes``, a ``TokenCounter``'s system texts — stay
under a byte bound however large the messages, and are emptied when a deletion is told to
``caches.forget`` (which ``HeldDeletion`` does once it has deleted a thread)."""

from __future__ import annotations

import gc
import sys
import uuid
import weakref
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage

from tests.support.heap import deep_size
from threadkeeper.domain import caches, history, tokens
from threadkeeper.domain.caches import MESSAGE_OVERHEAD, message_bytes
from threadkeeper.domain.history import TurnWindowPolicy
from threadkeeper.domain.retention import ErasureReceipt, HeldDeletion
from threadkeeper.domain.tokens import CharacterCounter, IdentityMemo, SliceSums

LARGE = 11_000


def big(i: int, kind: type[BaseMessage] = HumanMessage) -> BaseMessage:
    return kind(uuid.uuid4().hex * (LARGE // 32), id=f"m{i}")


def test_a_messages_bytes_are_its_texts_and_an_overhead() -> None:
    text = "x" * 1000
    header = sys.getsizeof("")  # a str's own header: 49 bytes on CPython 3.11, 41 on 3.13
    assert message_bytes(HumanMessage(text)) == len(text) + header + MESSAGE_OVERHEAD
    blocks = HumanMessage([{"type": "text", "text": text}, "y" * 10])
    assert message_bytes(blocks) > len(text) + 10 + MESSAGE_OVERHEAD
    assert message_bytes(HumanMessage("")) >= MESSAGE_OVERHEAD


def test_an_identity_memo_stays_under_its_byte_bound_and_forgets() -> None:
    bound = 200_000
    memo: IdentityMemo[int] = IdentityMemo(budget=bound)
    held = [big(i) for i in range(100)]
    for i, message in enumerate(held):
        memo.put(message, i)
        assert memo.size <= bound
    assert 0 < len(memo) < 20
    assert deep_size(memo) <= bound * 3 // 2
    caches.forget(threads=["acme:u1:t1"])
    assert len(memo) == 0
    assert memo.size == 0
    assert memo.get(held[-1]) is None


def test_slice_sums_stay_under_their_byte_bound_and_forget() -> None:
    bound = 200_000
    sums = SliceSums(lambda m: (len(str(m.content)),), 1, budget=bound)
    history_ = [big(i) for i in range(100)]
    for end in range(1, len(history_) + 1):  # a growing thread, its window sliding
        window = history_[max(0, end - 8) : end]
        assert sums.total(window) == (sum(len(str(m.content)) for m in window),)
        assert sums.size <= bound
    assert deep_size(sums) <= bound * 3 // 2 + deep_size(history_[-8:])
    caches.forget(user=("acme", "u1"))
    assert sums.size == 0
    assert not sums._where


def test_turn_indexes_stay_under_their_byte_bound_and_forget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bound = 300_000
    monkeypatch.setattr(history, "INDEXED_BYTES", bound)
    policy = TurnWindowPolicy(CharacterCounter())
    for thread in range(30):
        turns: list[BaseMessage] = []
        for turn in range(3):
            turns += [big(thread * 10 + turn), AIMessage("ok", id=f"a{thread}-{turn}")]
        turns.append(HumanMessage("and now?", id=f"n{thread}"))
        policy.window(turns, budget=10**6)
        assert policy._turns.size <= bound
    assert len(policy._turns) < 30
    caches.forget(threads=["acme:u1:t1"])
    assert len(policy._turns) == 0
    assert policy._turns.size == 0


def test_a_counters_system_texts_stay_under_their_byte_bound_and_forget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tokens, "SYSTEM_CACHE_BYTES", 100_000)
    counter = CharacterCounter()
    for _ in range(50):
        summary = "Summary: " + uuid.uuid4().hex * 340
        assert counter.count_system(summary) == tokens.MESSAGE_FRAMING + len(summary)
        assert counter._system_bytes <= 100_000
    assert deep_size(counter._system_cache) <= 150_000
    counter.count(big(1))
    caches.forget(threads=["acme:u1:t1"])
    assert not counter._system_cache
    assert counter._system_bytes == 0
    assert len(counter._objects) == 0


def test_a_counters_cache_keys_hold_no_text() -> None:
    counter = CharacterCounter()
    marker = f"zq{uuid.uuid4().hex}"
    call = {"name": "lookup", "args": {"q": marker}, "id": "c1", "type": "tool_call"}
    counter.count(AIMessage(marker, id="a1", tool_calls=[call]))
    assert marker not in repr(counter._cache)


class Spy:
    def __init__(self) -> None:
        self.told: list[tuple[frozenset[str], tuple[str, str] | None]] = []

    def forget(self, threads: frozenset[str], user: tuple[str, str] | None) -> None:
        self.told.append((threads, user))


class Deleting(HeldDeletion):
    def __init__(self, idle: bool = True) -> None:
        self.idle = idle

    async def idle_threads(self, cutoff: datetime, *, limit: int) -> list[str]:
        return []

    async def is_idle(self, thread_key: str, cutoff: datetime) -> bool:
        return self.idle

    async def _delete_held(self, thread_key: str) -> ErasureReceipt:
        return ErasureReceipt(threads=1)

    async def erase_user(self, tenant_id: str, user_id: str) -> ErasureReceipt:
        raise NotImplementedError

    async def remaining(
        self, tenant_id: str, user_id: str, thread_keys: Sequence[str]
    ) -> dict[str, int]:
        return {}


async def test_a_held_deletion_tells_the_caches_once_the_thread_is_deleted() -> None:
    spy = Spy()
    caches.register(spy)
    await Deleting().delete_threads(["acme:u1:t1", "acme:u1:t2"])
    assert spy.told == [(frozenset({"acme:u1:t1"}), None), (frozenset({"acme:u1:t2"}), None)]
    spy.told.clear()
    await Deleting(idle=False).delete_thread("acme:u1:t3", idle_before=datetime.now())
    assert spy.told == []  # active again: nothing deleted, nothing to forget


def test_caches_are_held_weakly() -> None:
    spy: Any = Spy()
    caches.register(spy)
    gone = weakref.ref(spy)
    del spy
    gc.collect()
    assert gone() is None  # the registry kept no cache alive
    caches.forget(threads=["acme:u1:t1"])
