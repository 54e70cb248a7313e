"""Nothing lost: the memory a run teaches is follow-up work (``domain.followups``), done after
the run was acknowledged — and every acknowledged round's memory lands, or is gone for good
when its user was erased, against real server processes and real HTTP on every profile:

- the next message sent the instant an answer ends is never refused (409), and every round
  of the thread leaves its fact in memory;
- an extraction provider that fails for a while (HTTP 500) does not fail the answers: the
  work stays pending, its failed attempts are counted ``retried``, nothing is given up, and
  the facts land once the provider recovers;
- a replica SIGKILLed while its extraction is in flight, or while its write is under way,
  leaves the work leased to nobody alive: a replica on the same storage takes it over once
  the lease ran out (postgres, redis-mysql); on embedded, the server started again on the
  same data dir does;
- erasing a user with work pending (one extraction in flight, one queued) leaves memory
  empty, and nothing of that work is written after the receipt.

The model is the fake OpenAI-compatible provider (``tests.support.fake_openai``), so the
memory extractor is the model-based one and each extraction is a real HTTP call, which the
tests fail, hang or hold (``FakeProvider.mode_for``) while chat calls are answered. The
extraction's answer is the fact each message of ``TEACHINGS`` teaches. Tests assert order and
outcome, never speed: every wait has a generous deadline.

Each profile's replicas (``Site``: two on one storage on the server profiles, so any of them
may do a round's work) are shared by the module — starting one is the slowest part of a
test, and a test that kills one starts it again while it waits for the lease — so each test
has a user of its own, and compares counters before and after.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import sqlite3
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import psycopg
import pytest
from httpx_sse import aconnect_sse

from tests.api.conftest import PROFILES, Servers
from tests.reliability.conftest import FULL, Measure, sized
from tests.support import mysql
from tests.support.fake_openai import (
    FakeProvider,
    JsonObject,
    Mode,
    ModeFor,
    default_answer,
    fake_provider,
    last_user_text,
    message_text,
)
from tests.support.followups import asettled_memory
from tests.support.load import send, transcript
from tests.support.redis_stack import PrivateRedis
from tests.support.servers import ProfileServer, start_server, storage
from threadkeeper.app.memory import EXTRACTION_PROMPT

SERVER_PROFILES = [p for p in PROFILES if not isinstance(p, str)]

FOLLOWUP_TIMEOUT_SECONDS = 3.0
"""One attempt's preparation (the extraction call): a hung extraction fails after this."""
FOLLOWUP_LEASE_SECONDS = 14.0
"""A replica's hold on work it took (the config wants more than the timeout + 10 s): a killed
replica's work is taken over after this."""
OUTAGE_SECONDS = sized(6, 30)
"""How long extraction calls fail in the outage test: 30 s at full size; 6 s in CI, still
three failed attempts (backoff 1 s, 2 s, 4 s), the fourth after the provider recovered."""
TURNS = 6
"""Rounds of the thread whose next message is sent at once (one fact each)."""
SETTLE_SECONDS = 120.0
"""Deadline for follow-up work to be done (generous: a busy machine, backoffs, a lease)."""
STAYS_EMPTY_SECONDS = 2.0
"""How long an erased user's memory is watched after the worker's deadline."""
MODELS = ("fake-model", "fake-second")
"""The model of each replica of a site (named apart: the provider tells whose call it
serves)."""


class Teaching(NamedTuple):
    """A message, and the fact a round of it teaches (the fake extraction's answer)."""

    message: str
    key: str
    value: str


TEACHINGS = (
    Teaching("What does life insurance cost for a couple?", "product:life", "life insurance"),
    Teaching("Do you offer car insurance for a second car?", "product:car", "car insurance"),
    Teaching("Is lost luggage included in travel insurance?", "product:travel", "travel insurance"),
    Teaching("Does home insurance cover a flooded basement?", "product:home", "home insurance"),
    Teaching("Does pet insurance cover two cats?", "product:pet", "pet insurance"),
    Teaching("How do I move my pension plan to you?", "product:pension", "pension / annuity"),
)


def is_extraction(body: JsonObject) -> bool:
    """Whether a provider request is a memory extraction (``app.memory.ModelExtractor``)."""
    messages = body.get("messages") or []
    return bool(messages) and message_text(messages[0]) == EXTRACTION_PROMPT


def answer(body: JsonObject) -> str:
    """The extraction of a ``TEACHINGS`` message is its fact; anything else the default."""
    if not is_extraction(body):
        return default_answer(body)
    said = last_user_text(body)
    return json.dumps(
        [{"kind": "facts", "key": t.key, "value": t.value} for t in TEACHINGS if t.message == said]
    )


def extractions(mode: Mode) -> ModeFor:
    """A ``mode_for``: extraction calls in ``mode``, the rest as the provider is set."""

    def choose(body: JsonObject) -> Mode | None:
        return mode if is_extraction(body) else None

    return choose


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    with fake_provider(answer=answer) as running:
        yield running


@pytest.fixture(autouse=True)
def _fresh(provider: FakeProvider) -> Iterator[None]:
    def fresh() -> None:
        provider.mode_for = None
        provider.delay = 0.05
        provider.reset()  # releases requests a test left held

    fresh()
    yield
    fresh()


def server_env(provider: FakeProvider) -> dict[str, str]:
    return {
        "OPENAI_BASE_URL": provider.url,
        "OPENAI_API_KEY": "test-key",
        "THREADKEEPER_FOLLOWUP_TIMEOUT_SECONDS": str(FOLLOWUP_TIMEOUT_SECONDS),
        "THREADKEEPER_FOLLOWUP_LEASE_SECONDS": str(FOLLOWUP_LEASE_SECONDS),
    }


class Site:
    """One profile's storage for the module and the replicas serving it: two on the server
    profiles, one on embedded (one process per data dir). Each replica's model has a name of
    its own (``MODELS``), so the provider tells whose call it serves; ``replicas`` maps it to
    the replica. A replica killed by a test is started again on the same storage
    (``restart``)."""

    def __init__(
        self,
        profile: str,
        root: Path,
        servers: Servers,
        redis: PrivateRedis | None,
        env: dict[str, str],
    ) -> None:
        self.profile, self.root, self.servers, self.redis, self.env = (
            profile,
            root,
            servers,
            redis,
            env,
        )
        self.replicas: dict[str, ProfileServer] = {}
        self._running: dict[str, contextlib.ExitStack] = {}
        models = MODELS[:1] if profile == "embedded" else MODELS
        try:
            with ThreadPoolExecutor(len(models)) as pool:  # started side by side
                list(pool.map(self._start, models))
        except BaseException:
            self.close()
            raise

    @property
    def server(self) -> ProfileServer:
        """The first replica."""
        return self.replicas[MODELS[0]]

    def _start(self, model: str) -> None:
        running = contextlib.ExitStack()
        self._running[model] = running
        self.replicas[model] = running.enter_context(
            start_server(
                self.profile,
                self.root / model,
                self.servers,
                self.redis,
                **self.env,
                THREADKEEPER_MODEL=f"openai:{model}",
            )
        )

    def restart(self, model: str) -> None:
        """The replica of ``model`` as a new process on the same storage (and data dir)."""
        self._running.pop(model).close()
        del self.replicas[model]
        self._start(model)

    async def outcomes(self, *models: str) -> Counter[str]:
        """``outcomes`` summed over the replicas (of ``models``, if given)."""
        total: Counter[str] = Counter()
        for model in models or list(self.replicas):
            async with client(self.replicas[model], "metrics") as c:
                total.update(await outcomes(c))
        return total

    def close(self) -> None:
        for running in self._running.values():
            running.close()
        self._running.clear()


@pytest.fixture(scope="module", params=PROFILES)
def site(
    request: pytest.FixtureRequest,
    provider: FakeProvider,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Site]:
    profile = str(request.param)
    with storage(profile) as (servers, redis):
        running = Site(
            profile,
            tmp_path_factory.mktemp(f"followups-{profile}"),
            servers,
            redis,
            server_env(provider),
        )
        try:
            yield running
        finally:
            running.close()


# -- helpers ------------------------------------------------------------------------------------


def client(server: ProfileServer, user: str) -> httpx.AsyncClient:
    headers = {**server.headers, "X-User-Id": user}
    return httpx.AsyncClient(base_url=server.url, headers=headers, timeout=120)


async def stream_until_end(
    c: httpx.AsyncClient, thread: str, content: str
) -> tuple[int, list[str]]:
    """An SSE run, read up to its ``end`` (or ``error``) and left at once: (status, the
    event names, or the problem's text)."""
    kinds: list[str] = []
    body = {"message": {"content": content}}
    async with aconnect_sse(c, "POST", f"/v1/threads/{thread}/runs", json=body) as source:
        if source.response.status_code != 200:
            await source.response.aread()
            return source.response.status_code, [source.response.text]
        async for event in source.aiter_sse():
            kinds.append(event.event)
            if event.event in {"end", "error"}:
                break
    return 200, kinds


_OUTCOME = re.compile(r'outcome="([a-z_]+)"')


async def outcomes(c: httpx.AsyncClient) -> Counter[str]:
    """``threadkeeper_followups_total`` of memory work, per outcome, from the server's
    ``/metrics`` (cumulative over the process: tests compare before and after)."""
    response = await c.get("/metrics")
    assert response.status_code == 200, response.text
    counted: Counter[str] = Counter()
    for line in response.text.splitlines():
        if line.startswith("threadkeeper_followups_total{") and 'kind="memory"' in line:
            found = _OUTCOME.search(line)
            if found:
                counted[found.group(1)] += int(float(line.rsplit(" ", 1)[1]))
    return counted


def facts_of(memory: dict[str, Any]) -> dict[str, str]:
    return {fact["key"]: fact["value"] for fact in memory["facts"]}


def taught(*teachings: Teaching) -> dict[str, str]:
    return {t.key: t.value for t in teachings}


def extraction_calls(provider: FakeProvider, message: str) -> list[JsonObject]:
    """The extraction requests of rounds of ``message`` so far, oldest first."""
    return [b for b in list(provider.requests) if is_extraction(b) and last_user_text(b) == message]


async def extraction_of(provider: FakeProvider, message: str, *, seconds: float = 60) -> JsonObject:
    """The first extraction request of a round of ``message``, once it arrived."""
    deadline = time.monotonic() + seconds
    while not (calls := extraction_calls(provider, message)):
        assert time.monotonic() < deadline, f"no extraction of {message!r} reached the provider"
        await asyncio.sleep(0.02)
    return calls[0]


def followup_rows(server: ProfileServer, user: str) -> list[tuple[str, bool, int]]:
    """The user's memory work in ``tk_followups``: (state, leased, attempts), oldest first."""
    sql = (
        "SELECT state, lease IS NOT NULL, attempts FROM tk_followups "
        "WHERE kind = 'memory' AND user_id = {} ORDER BY id"
    )
    rows: list[tuple[Any, ...]]
    if server.profile == "embedded":
        database = server.data_dir / "threadkeeper.sqlite3"
        with contextlib.closing(sqlite3.connect(database, timeout=30)) as conn:
            rows = conn.execute(sql.format("?"), (user,)).fetchall()
    elif server.profile == "postgres":
        assert server.servers.postgres_url is not None
        with psycopg.connect(server.servers.postgres_url, autocommit=True) as conn:
            rows = conn.execute(sql.format("%s"), (user,)).fetchall()
    else:
        assert server.servers.mysql_url is not None
        rows = mysql.query(server.servers.mysql_url, sql.format("%s"), (user,))
    return [(str(state), bool(leased), int(attempts)) for state, leased, attempts in rows]


def kill(server: ProfileServer) -> None:
    server.process.kill()  # SIGKILL: nothing handed back, the lease runs out on its own
    server.process.wait(timeout=30)


@contextlib.contextmanager
def memory_writes_held(server: ProfileServer) -> Iterator[None]:
    """Inserts into the memory store's table wait until the block is left (reads and other
    writes go on): a trigger that takes a lock the test's own session holds (postgres,
    redis-mysql)."""
    key = uuid.uuid4().int % 2**31
    if server.profile == "postgres":
        assert server.servers.postgres_url is not None
        with psycopg.connect(server.servers.postgres_url, autocommit=True) as conn:
            conn.execute(
                "CREATE FUNCTION tk_hold_writes() RETURNS trigger LANGUAGE plpgsql AS "
                f"$$ BEGIN PERFORM pg_advisory_xact_lock(7, {key}); RETURN NEW; END $$"
            )
            conn.execute(
                "CREATE TRIGGER tk_hold_writes BEFORE INSERT ON store "
                "FOR EACH ROW EXECUTE FUNCTION tk_hold_writes()"
            )
            conn.execute("SELECT pg_advisory_lock(7, %s)", (key,))
            try:
                yield
            finally:  # the lock first: a held insert keeps the table from the DROP
                conn.execute("SELECT pg_advisory_unlock(7, %s)", (key,))
                conn.execute("DROP TRIGGER tk_hold_writes ON store")
                conn.execute("DROP FUNCTION tk_hold_writes()")
        return
    assert server.servers.mysql_url is not None
    name = f"tk_hold_writes_{key}"
    with mysql.connect(server.servers.mysql_url) as conn, conn.cursor() as cur:
        cur.execute(
            "CREATE TRIGGER tk_hold_writes BEFORE INSERT ON store FOR EACH ROW BEGIN "
            f"SET @tk_held = GET_LOCK('{name}', 600); SET @tk_held = RELEASE_LOCK('{name}'); END"
        )
        cur.execute("SELECT GET_LOCK(%s, 10)", (name,))
        try:
            yield
        finally:
            cur.execute("SELECT RELEASE_LOCK(%s)", (name,))
            cur.execute("DROP TRIGGER tk_hold_writes")


async def row_state(server: ProfileServer, user: str, state: str, *, seconds: float = 60) -> None:
    """Wait until the user's one follow-up row is in ``state``."""
    deadline = time.monotonic() + seconds
    while [row[0] for row in followup_rows(server, user)] != [state]:
        assert time.monotonic() < deadline, f"{followup_rows(server, user)}, never {state!r}"
        await asyncio.sleep(0.02)


# -- the tests ----------------------------------------------------------------------------------


async def test_the_next_message_at_once_loses_no_memory(
    site: Site, provider: FakeProvider, measure: Measure
) -> None:
    """Each message is sent the instant the previous answer ended (SSE ``end`` and JSON
    200 in turn; on the server profiles to each replica in turn), while the memory work of
    the earlier rounds is still being done: no 409, every round stored in order, and once
    settled every round's fact is in memory."""
    user, thread = "at-once", "at-once"
    rounds = TEACHINGS[:TURNS]
    replicas = list(site.replicas.values())
    async with contextlib.AsyncExitStack() as stack:
        clients = [await stack.enter_async_context(client(r, user)) for r in replicas]
        start = time.monotonic()
        for turn, teaching in enumerate(rounds):
            c = clients[turn % len(clients)]
            if turn % 2 == 0:
                status, kinds = await stream_until_end(c, thread, teaching.message)
                assert status == 200, f"turn {turn}: {status} {kinds}"
                assert kinds[0] == "metadata", kinds
                assert kinds[-1] == "end", f"turn {turn}: {kinds}"
            else:
                answered = await send(c, thread, teaching.message)
                assert answered.status_code == 200, f"turn {turn}: {answered.text}"
                assert answered.json()["status"] == "answered", answered.text
        acknowledged = time.monotonic()
        memory = await asettled_memory(clients[0], user, seconds=SETTLE_SECONDS)
        settled = time.monotonic()
        assert facts_of(memory) == taught(*rounds), "every round's fact is in memory"
        assert {fact["source"]["thread_id"] for fact in memory["facts"]} == {thread}
        messages = await transcript(clients[0], thread)
    humans = [m["content"] for m in messages or [] if m["role"] == "human"]
    assert humans == [t.message for t in rounds], "every round stored once, in order"
    assert all(extraction_calls(provider, t.message) for t in rounds), "each round extracted"
    measure(
        "followups",
        scenario=f"{TURNS} messages, each sent as the answer ends, over {len(replicas)} replica(s)",
        profile=site.profile,
        seconds_to_acknowledge_all=round(acknowledged - start, 2),
        seconds_to_settle=round(settled - acknowledged, 2),
    )


async def test_an_extraction_outage_delays_memory_and_loses_none(
    site: Site, provider: FakeProvider, measure: Measure
) -> None:
    """Extraction calls fail (HTTP 500) for ``OUTAGE_SECONDS`` while chat calls are
    answered: the runs are acknowledged, the work stays pending through the outage and its
    failed attempts are counted ``retried``; after the recovery the facts land (the second
    round's work waited behind the first's) and nothing was given up."""
    user, thread = "outage", "outage"
    rounds = TEACHINGS[:2]
    async with client(site.server, user) as c:
        before = await site.outcomes()
        provider.mode_for = extractions("error_500")
        start = time.monotonic()
        for teaching in rounds:
            answered = await send(c, thread, teaching.message)
            assert answered.status_code == 200, answered.text
            assert answered.json()["status"] == "answered", answered.text
        deadline = start + 60
        while (await site.outcomes())["retried"] <= before["retried"]:
            assert time.monotonic() < deadline, (
                f"no failed attempt counted:\n{site.server.output()}"
            )
            await asyncio.sleep(0.1)
        while time.monotonic() < start + OUTAGE_SECONDS:
            during = (await c.get(f"/v1/users/{user}/memory")).json()
            assert during["pending"] is True, f"the work is still to do: {during}"
            assert during["facts"] == [], during
            await asyncio.sleep(0.25)
        failed = provider.count("error_500")
        assert failed >= 1
        provider.mode_for = None
        recovered = time.monotonic()
        memory = await asettled_memory(c, user, seconds=SETTLE_SECONDS)
        landed = time.monotonic()
        assert facts_of(memory) == taught(*rounds), "both rounds' facts landed"
    after = await site.outcomes()
    assert after["retried"] > before["retried"]
    assert after["given_up"] == before["given_up"], "nothing was given up"
    assert after["done"] - before["done"] >= len(rounds)
    assert provider.count("ok") >= len(rounds), "the chat calls were answered meanwhile"
    measure(
        "followups",
        scenario=f"extraction failing for {OUTAGE_SECONDS} s",
        profile=site.profile,
        failed_calls=failed,
        retried=after["retried"] - before["retried"],
        seconds_to_land_after_recovery=round(landed - recovered, 2),
    )


@pytest.mark.parametrize(
    "phase",
    [
        "extraction",
        # the write's variant at full size only (CI's budget): the conformance suite holds the
        # same rule on every store (test_a_write_whose_worker_died_is_taken_again_…)
        pytest.param(
            "write", marks=pytest.mark.skipif(not FULL, reason="full size only (CI budget)")
        ),
    ],
)
@pytest.mark.parametrize("site", SERVER_PROFILES, indirect=True)
async def test_a_killed_replicas_work_is_taken_over_after_its_lease(
    site: Site, provider: FakeProvider, measure: Measure, phase: str
) -> None:
    """A run is answered by the second replica, and the replica that took its memory work
    — the answering one is woken at once, the other polls every 0.5 s, so either may — is
    SIGKILLed in the middle of it: with its extraction call in flight (every extraction
    hangs), or with its write announced and under way (the memory store's table holds its
    inserts). The work stays leased to the dead replica (pending, taken by nobody) until the
    lease runs out; then a live replica takes it over and the fact lands. The killed replica
    is started again meanwhile (it may be the one that takes the work)."""
    user, thread, teaching = f"taken-over-{phase}", "taken-over", TEACHINGS[4]
    in_write = phase == "write"
    if not in_write:
        provider.mode_for = extractions("hang")
    answering = site.replicas[MODELS[1]]
    before = {model: await site.outcomes(model) for model in site.replicas}
    with memory_writes_held(answering) if in_write else contextlib.nullcontext():
        async with client(answering, user) as c:
            answered = await send(c, thread, teaching.message)
        assert answered.status_code == 200, answered.text
        held_by = str((await extraction_of(provider, teaching.message))["model"])
        if in_write:
            await row_state(answering, user, "writing")
        kill(site.replicas[held_by])
        killed = time.monotonic()
    provider.mode_for = None
    (survivor,) = set(site.replicas) - {held_by}
    restarted = asyncio.create_task(asyncio.to_thread(site.restart, held_by))
    try:
        held = followup_rows(site.replicas[survivor], user)
        assert held == [("writing" if in_write else "ready", True, 1)], (
            f"the killed replica held the work ({phase}), on its first attempt"
        )
        async with client(site.replicas[survivor], user) as c:
            pending = (await c.get(f"/v1/users/{user}/memory")).json()
            assert pending["pending"] is True, pending
            memory = await asettled_memory(c, user, seconds=SETTLE_SECONDS)
            landed = time.monotonic()
            assert facts_of(memory) == taught(teaching), "the killed replica's work was done"
            messages = await transcript(c, thread)
    finally:
        await restarted  # the next test has both replicas again
    after = await site.outcomes()  # the survivor's, and the restarted replica's from 0
    assert after["done"] > before[survivor]["done"], "done by a live replica"
    assert after["given_up"] == before[survivor]["given_up"]
    calls = [str(b.get("model")) for b in extraction_calls(provider, teaching.message)]
    assert len(calls) == 2, calls
    assert calls[0] == held_by, "extracted by the killed replica, then once more"
    assert [m["content"] for m in messages or [] if m["role"] == "human"] == [teaching.message]
    measure(
        "followups",
        scenario=f"replica SIGKILLed in its {phase}, taken over after its lease "
        f"({FOLLOWUP_LEASE_SECONDS:g} s)",
        profile=site.profile,
        killed="the answering replica" if held_by == MODELS[1] else "the other replica",
        taken_over_by="the survivor" if calls[1] == survivor else "the restarted replica",
        seconds_to_land_after_kill=round(landed - killed, 2),
    )


@pytest.mark.parametrize("site", ["embedded"], indirect=True)
async def test_work_pending_at_a_kill_is_done_after_the_restart(
    site: Site, provider: FakeProvider, measure: Measure
) -> None:
    """The embedded server is SIGKILLed with its extraction in flight and started again on
    the same data dir: once the dead process's lease ran out the restarted one does the
    work, and the fact lands."""
    user, thread, teaching = "restarted", "restarted", TEACHINGS[3]
    provider.mode_for = extractions("hang")
    async with client(site.server, user) as c:
        answered = await send(c, thread, teaching.message)
    assert answered.status_code == 200, answered.text
    await extraction_of(provider, teaching.message)
    kill(site.server)
    killed = time.monotonic()
    assert followup_rows(site.server, user) == [("ready", True, 1)], "killed with work in flight"
    provider.mode_for = None
    await asyncio.to_thread(site.restart, MODELS[0])
    async with client(site.server, user) as c:
        memory = await asettled_memory(c, user, seconds=SETTLE_SECONDS)
        landed = time.monotonic()
        assert facts_of(memory) == taught(teaching), "the work was done after the restart"
        counted = await outcomes(c)
        messages = await transcript(c, thread)
    assert counted["done"] >= 1, "by the restarted process"
    assert [m["content"] for m in messages or [] if m["role"] == "human"] == [teaching.message]
    assert len(extraction_calls(provider, teaching.message)) == 2
    measure(
        "followups",
        scenario=f"embedded SIGKILLed with extraction in flight, restarted (lease "
        f"{FOLLOWUP_LEASE_SECONDS:g} s)",
        profile=site.profile,
        seconds_to_land_after_kill=round(landed - killed, 2),
    )


async def test_erasure_with_work_pending_leaves_memory_empty(
    site: Site, provider: FakeProvider, measure: Measure
) -> None:
    """A user with a fact in memory, a round whose extraction is in flight (held by the
    provider) and a round whose work is queued behind it is erased. The held extraction is
    then answered: its write is refused (``dropped``), the queued work is never even
    extracted, and past the worker's deadline memory is empty and stays so."""
    user, thread = "erased", "erased"
    known, held, queued = TEACHINGS[:3]
    async with client(site.server, user) as c:
        logged = len(site.server.log)
        answered = await send(c, thread, known.message)
        assert answered.status_code == 200, answered.text
        memory = await asettled_memory(c, user, seconds=SETTLE_SECONDS)
        assert facts_of(memory) == taught(known), (
            f"{memory}; memory work: {dict(await outcomes(c))}; the answer: {answered.text}; "
            f"the server printed:\n{''.join(site.server.log[logged:][-60:]) or '(nothing)'}"
        )
        provider.delay = 3600.0  # per chunk of "slow": held until released
        provider.mode_for = extractions("slow")
        for teaching in (held, queued):
            answered = await send(c, thread, teaching.message)
            assert answered.status_code == 200, answered.text
        await extraction_of(provider, held.message)
        seen = time.monotonic()
        pending = (await c.get(f"/v1/users/{user}/memory")).json()
        assert pending["pending"] is True, pending
        before = await site.outcomes()
        erased = await c.delete(f"/v1/users/{user}")
        receipt_at = time.monotonic()
        assert erased.status_code == 200, erased.text
        receipt = erased.json()
        assert receipt["threads"] == 1, receipt
        assert receipt["memory_items"] >= 1, receipt
        assert not any(receipt["remaining"].values()), receipt
        provider.release()  # the held extraction is answered after the receipt
        deadline = time.monotonic() + 60
        while (ended := await site.outcomes())["dropped"] <= before["dropped"]:
            assert ended["done"] == before["done"], "the erased user's work was written"
            assert time.monotonic() < deadline, "the held work never ended"
            await asyncio.sleep(0.1)
        await asyncio.sleep(max(0.0, seen + FOLLOWUP_TIMEOUT_SECONDS + 1 - time.monotonic()))
        watched_until = time.monotonic() + STAYS_EMPTY_SECONDS
        while True:
            for replica in site.replicas.values():
                async with client(replica, user) as r:
                    memory = (await r.get(f"/v1/users/{user}/memory")).json()
                assert memory == {"profile": [], "facts": [], "pending": False}, memory
            if time.monotonic() >= watched_until:
                break
            await asyncio.sleep(0.25)
        gone = await c.get(f"/v1/threads/{thread}/messages")
        assert gone.status_code == 404, gone.text
    after = await site.outcomes()
    assert after["done"] == before["done"], "nothing of the erased user's work was written"
    assert after["given_up"] == before["given_up"]
    assert extraction_calls(provider, queued.message) == [], "the queued work was cancelled"
    measure(
        "followups",
        scenario="user erased with one extraction in flight and one queued",
        profile=site.profile,
        seconds_from_held_extraction_to_receipt=round(receipt_at - seen, 2),
    )
