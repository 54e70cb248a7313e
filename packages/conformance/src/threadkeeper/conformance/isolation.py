"""Isolation conformance: no read, reset, deletion or erasure of one id reaches a sibling id.

A store call that matches ids by ``LIKE`` or by prefix, or compares them without regard to
case, mixes ids that differ only by ``_`` or ``%`` (wildcards), by a separator (``.``, ``-``,
``:``), by letter case, or by one being a prefix of the other (``u1`` / ``u10``). The property
here draws such pairs — as tenants, as users, and as threads — stores a round, memory and
feedback under each, then checks that every read of one names only its own data (memory,
transcript, storage report, feedback, the user's threads: what ``export`` reads) and that a
memory reset, a thread deletion, a retention deletion or an erasure of one leaves the other
whole (and answers within a deadline: a deletion looping over a sibling's rows never ends).

Subclass ``IsolationConformance`` and provide ``open_backend`` (as for ``BackendConformance``).
``isolation_examples`` (a fixture, 10 by default) sets how many pairs are drawn; a full run
asks for more. Every example uses ids of its own (a fixed-width example number leads them),
so examples share the opened backend without sharing data.
"""

from __future__ import annotations

import asyncio
import itertools
import string
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from langgraph.store.base import SearchItem, SearchOp

from threadkeeper.conformance.backend import (
    Stored,
    Turn,
    give_feedback,
    store_round,
    transcript_of,
)
from threadkeeper.domain.memory import MemoryKind, memory_namespace
from threadkeeper.domain.threads import (
    TENANT_OR_USER_ID,
    THREAD_ID,
    ThreadRef,
    ThreadScope,
    stored_user_id,
    user_id_problem,
)
from threadkeeper.domain.transcript import to_transcript

if TYPE_CHECKING:
    from threadkeeper.adapters.profile import StorageBackend

Role = Literal["tenant", "user", "thread"]
Action = Literal["reset_memory", "erase_user", "delete_thread", "retention"]

DEADLINE_SECONDS = 60.0
"""A deletion of one id that has not answered by then is looping over another's rows."""

_MARKS = "_%.-:"
_ALPHABET = string.ascii_letters + string.digits + _MARKS + "@|+ ~/é"
"""Users take every character here (issue 29, item 3); tenants and threads the plain ones."""


def _valid(role: Role, value: str) -> bool:
    if role == "user":  # any printable id: stored as itself, or hashed (stored_user_id)
        return user_id_problem(value) is None
    pattern = THREAD_ID if role == "thread" else TENANT_OR_USER_ID
    return pattern.fullmatch(value) is not None


@st.composite
def sibling_ids(draw: st.DrawFn, role: Role) -> tuple[str, str]:
    """Two distinct ids valid for ``role`` that a careless store would mix: one a prefix of
    the other, the same but for one character (``_``, ``%``, a separator, another letter),
    or the same but for letter case."""
    base = draw(st.text(_ALPHABET, min_size=1, max_size=12))
    how = draw(st.sampled_from(["prefix", "swap", "case"]))
    if how == "prefix":
        tail = draw(st.sampled_from(_MARKS + "0a")) + draw(st.text(_ALPHABET, max_size=4))
        pair = (base, base + tail)
    elif how == "swap":
        at = draw(st.integers(0, len(base) - 1))
        other = draw(st.sampled_from(_MARKS + "xX0").filter(lambda c: c != base[at]))
        pair = (base, base[:at] + other + base[at + 1 :])
    else:
        pair = (base, base.swapcase())
    if draw(st.booleans()):
        pair = (pair[1], pair[0])
    first, second = pair
    if first == second or not (_valid(role, first) and _valid(role, second)):
        from hypothesis import reject

        reject()
    return first, second


@dataclass(frozen=True)
class Side:
    """One of the pair: its thread, its stored round, and a mark its memory values carry."""

    ref: ThreadRef
    stored: Stored
    mark: str


_counter = itertools.count()


def _refs(role: Role, pair: tuple[str, str], scope: ThreadScope) -> tuple[ThreadRef, ThreadRef]:
    """The two threads: the pair in ``role``, the other parts shared; every id of the example
    led by a fixed-width example number (so no example's id is a prefix of another's).

    In scope ``global`` a thread belongs to the tenant, so two users are given two threads —
    the second's named as if under the first user (``bob`` / carol's ``bob:notes``: their keys
    ``acme:…`` and ``acme:bob:notes`` look like user ``bob``'s in scope ``user``)."""
    lead = f"e{next(_counter):06d}{uuid.uuid4().hex[:4]}"
    tenant, user, thread = f"{lead}t", f"{lead}u", f"{lead}h"
    refs: list[ThreadRef] = []
    for value in pair:
        parts = {"tenant": tenant, "user": user, "thread": thread}
        parts[role] = lead + value
        parts["user"] = stored_user_id(parts["user"])  # as the HTTP layer stores it
        if scope is ThreadScope.GLOBAL and role == "user" and refs:
            named = f"{refs[0].user_id}:{lead}n"  # a hashed id is no thread id: plain then
            parts["thread"] = named if THREAD_ID.fullmatch(named) else f"{lead}n"
        refs.append(ThreadRef(parts["tenant"], parts["user"], parts["thread"], scope))
    return refs[0], refs[1]


async def _memory(backend: StorageBackend, ref: ThreadRef) -> list[tuple[str, str, str]]:
    """The user's memory as the service reads it (both kinds in one ``abatch``) and as
    ``asearch`` reads it: (namespace, key, value) of every item; the two must agree."""
    kinds = list(MemoryKind)
    spaces = [memory_namespace(ref.tenant_id, ref.user_id, kind) for kind in kinds]
    found = await backend.store.abatch([SearchOp(space, limit=500) for space in spaces])
    batched = sorted(
        (".".join(item.namespace), item.key, str(item.value.get("value")))
        for items in found
        for item in cast("list[SearchItem]", items)
    )
    searched = []
    for space in spaces:
        searched += [
            (".".join(item.namespace), item.key, str(item.value.get("value")))
            for item in await backend.store.asearch(space, limit=500)
        ]
    searched.sort()
    assert batched == searched, (batched, searched)
    return batched


async def _side(backend: StorageBackend, ref: ThreadRef) -> Side:
    stored = await store_round(backend, ref, Turn.make(1))
    await give_feedback(backend, stored)
    mark = uuid.uuid4().hex
    for kind in MemoryKind:
        await backend.store.aput(
            memory_namespace(ref.tenant_id, ref.user_id, kind),
            f"k-{kind.value}",
            {"value": f"{mark}-{kind.value}", "source": {"thread_id": ref.thread_id}},
        )
    return Side(ref, stored, mark)


@dataclass(frozen=True)
class Seen:
    """Everything a read of one side returns (``export`` is made of these)."""

    transcript: list[tuple[str, str, str]] | None
    memory: list[tuple[str, str, str]]
    feedback: list[tuple[str, str]]
    threads: set[str]
    stored_bytes: int


async def _seen(backend: StorageBackend, side: Side, *, own_thread: bool = False) -> Seen:
    """What reads of ``side`` return; ``own_thread``: of the user's feedback and threads,
    only those of ``side``'s thread (the other side is the same user's other thread)."""
    ref = side.ref
    feedback = await backend.runs.user_feedback(ref.tenant_id, ref.user_id)
    threads = await backend.retention.user_thread_keys(ref.tenant_id, ref.user_id)
    usage = await backend.storage_usage(ref.key)
    return Seen(
        transcript=await transcript_of(backend, ref),
        memory=await _memory(backend, ref),
        feedback=sorted(
            (f.thread_key, f.run_id) for f in feedback if not own_thread or f.thread_key == ref.key
        ),
        threads={k for k in threads if not own_thread or k == ref.key},
        stored_bytes=usage.total,
    )


def _assert_only_its_own(seen: Seen, side: Side, shares_user: bool) -> None:
    """What a read of ``side`` returned names nothing but ``side``'s own data (and, where the
    two sides are the same user, that user's)."""
    ref = side.ref
    assert seen.transcript is not None
    assert seen.transcript
    assert {m[0] for m in seen.transcript} == {
        str(side.stored.turn.human.id),
        str(side.stored.turn.ai.id),
    }
    wanted = {".".join(memory_namespace(ref.tenant_id, ref.user_id, k)) for k in MemoryKind}
    assert {space for space, _, _ in seen.memory} == wanted, seen.memory
    if not shares_user:
        assert all(value.startswith(side.mark) for _, _, value in seen.memory), seen.memory
        assert seen.feedback == [(ref.key, side.stored.record.run_id)], seen.feedback
        assert seen.threads == {ref.key}, seen.threads
    else:
        assert (ref.key, side.stored.record.run_id) in seen.feedback
        assert ref.key in seen.threads
    assert seen.stored_bytes > 0


async def _act(backend: StorageBackend, action: Action, side: Side) -> None:
    ref = side.ref
    retention = backend.retention
    if action == "reset_memory":
        await retention.reset_memory(ref.tenant_id, ref.user_id)
    elif action == "erase_user":
        await retention.erase_user(ref.tenant_id, ref.user_id)
    elif action == "delete_thread":
        await retention.delete_thread(ref.key)
    else:
        await retention.delete_threads([ref.key])


class IsolationConformance:
    """Subclass and provide ``open_backend`` (an opened ``StorageBackend`` on empty storage)."""

    scope: ThreadScope = ThreadScope.USER

    @pytest.fixture
    def backend(self, open_backend: StorageBackend) -> StorageBackend:
        return open_backend

    @pytest.fixture
    def isolation_examples(self) -> int:
        return 10

    async def check_pair(
        self, backend: StorageBackend, role: Role, pair: tuple[str, str], action: Action
    ) -> None:
        """The property for one pair: reads see only their own; ``action`` on the first side
        answers in time and leaves the second whole."""
        if role == "thread" and action in ("reset_memory", "erase_user"):
            action = "delete_thread"  # both sides are one user: that would be theirs too
        first_ref, second_ref = _refs(role, pair, self.scope)
        first = await _side(backend, first_ref)
        second = await _side(backend, second_ref)
        shares_user = role == "thread"
        before = await _seen(backend, second, own_thread=shares_user)
        _assert_only_its_own(before, second, shares_user)
        _assert_only_its_own(await _seen(backend, first), first, shares_user)

        await asyncio.wait_for(_act(backend, action, first), DEADLINE_SECONDS)

        after = await _seen(backend, second, own_thread=shares_user)
        assert after == before, (action, role, pair, before, after)
        gone = await _seen(backend, first, own_thread=shares_user)
        if action == "reset_memory":
            assert gone.memory == []
            assert gone.transcript is not None
            assert gone.transcript
        else:
            assert gone.transcript is None
            assert gone.stored_bytes == 0
            if action == "erase_user":
                assert gone.memory == []
                assert gone.feedback == []
                assert gone.threads == set()

    async def test_erasing_a_user_deletes_the_shared_threads_they_took_part_in_whole(
        self, backend: StorageBackend
    ) -> None:
        """Scope ``global`` (a thread is the tenant's): erasing bob deletes the thread he and
        carol both wrote in, whole, and carol's own thread ``bob:notes`` not at all
        (docs/pii.md, "Erasure")."""
        if self.scope is not ThreadScope.GLOBAL:
            pytest.skip("threads are shared only in scope global")
        lead = f"e{next(_counter):06d}{uuid.uuid4().hex[:4]}"
        tenant, bob, carol = f"{lead}t", f"{lead}bob", f"{lead}carol"
        shared_bob = ThreadRef(tenant, bob, "shared", ThreadScope.GLOBAL)
        shared_carol = ThreadRef(tenant, carol, "shared", ThreadScope.GLOBAL)
        notes = ThreadRef(tenant, carol, f"{bob}:notes", ThreadScope.GLOBAL)
        await store_round(backend, shared_carol, Turn.make(0))
        await store_round(backend, shared_bob, Turn.make(1))
        await store_round(backend, shared_carol, Turn.make(2))  # carol wrote last
        kept = await store_round(backend, notes, Turn.make(3))
        receipt = await backend.retention.erase_user(tenant, bob)
        assert receipt.threads == 1
        assert set(receipt.remaining.values()) == {0}, receipt.remaining
        assert await transcript_of(backend, shared_carol) is None
        assert (await backend.storage_usage(shared_carol.key)).total == 0
        assert await transcript_of(backend, notes) == [
            (str(m.id), m.role, m.content) for m in to_transcript(kept.turn.messages)
        ]
        assert await backend.retention.user_thread_keys(tenant, carol) == {notes.key}

    @pytest.mark.parametrize(
        ("role", "pair", "action"),
        [
            ("user", ("1", "10"), "reset_memory"),  # u1's reset wiped u10's memory
            ("user", ("1", "1-2"), "erase_user"),
            ("user", ("_1", "X1"), "reset_memory"),  # u_1 read uX1's memory
            ("user", ("w_1", "wa1"), "reset_memory"),  # never answered
            ("user", ("w_1", "wa1"), "erase_user"),
            ("tenant", ("beta_x", "beta-x"), "erase_user"),  # through X-Tenant-Id: beta_x
            ("user", ("Bob", "bob"), "erase_user"),
            ("thread", ("t", "T"), "delete_thread"),
            ("thread", ("t", "t:x"), "retention"),
        ],
    )
    async def test_the_pairs_seen_crossing(
        self, backend: StorageBackend, role: Role, pair: tuple[str, str], action: Action
    ) -> None:
        """The pairs the security review saw crossing (issue 26), each way round."""
        await self.check_pair(backend, role, pair, action)
        await self.check_pair(backend, role, (pair[1], pair[0]), action)

    async def test_no_read_or_deletion_of_an_id_reaches_its_sibling(
        self, backend: StorageBackend, isolation_examples: int
    ) -> None:
        loop = asyncio.get_running_loop()

        @settings(
            max_examples=isolation_examples,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        )
        @given(data=st.data())
        def check(data: st.DataObject) -> None:
            role = cast("Role", data.draw(st.sampled_from(["tenant", "user", "thread"])))
            pair = data.draw(sibling_ids(role), label="pair")
            action = cast(
                "Action",
                data.draw(
                    st.sampled_from(["reset_memory", "erase_user", "delete_thread", "retention"])
                ),
            )
            note(f"role={role} pair={pair!r} action={action}")
            # Hypothesis drives from a worker thread; each example runs on the test's loop,
            # where the backend's pools live
            done = asyncio.run_coroutine_threadsafe(
                self.check_pair(backend, role, pair, action), loop
            )
            done.result(timeout=DEADLINE_SECONDS * 3)

        await asyncio.to_thread(check)
