"""After an erasure's receipt, and after a thread's deletion, no process cache of this replica
holds the user's (the thread's) text; and every cache that can hold a user's text keeps under
its byte bound (issue 26, item 11: the recent prompts of ``adapters.sql``, the builtin model's
``_terms``, the message memo and the ledger's cache still held an erased user's text, and 600
runs of ~11 KB grew the caches by 45 MB).

The text is found wherever this process holds it (``tests.support.heap.holding``: every string
reachable from the objects the garbage collector tracks), so a cache nobody listed is found
too. Each marker is first seen held — so the test can fail — then gone once the receipt is
given; on every profile (the server profiles' connections are opened during runs, and each
keeps the context it was opened in: the run's staged checkpoints and trace are emptied when
the run ends). The byte bounds are the same code in every profile: measured on embedded."""

from __future__ import annotations

import gc
import random
import uuid
from typing import Any

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.api.conftest import PROFILES, AppFactory, run
from tests.support.heap import deep_size, holding

EVERY_PROFILE = pytest.mark.parametrize("profile", PROFILES, indirect=True)
EMBEDDED = pytest.mark.parametrize("profile", ["embedded"], indirect=True)

FILLER = " Please tell me everything about my policy and what it pays for." * 10
"""Long messages: older turns fall out of the window and are folded into the summary (a
text ``adapters.sql`` keeps as the base of the thread's next summary)."""
SMALL = {"token_budget": 1500, "summary_after_turns": 1}


def latin_marker() -> str:
    return "zq" + uuid.uuid4().hex[:12]


def cjk_marker() -> str:
    """A run of CJK characters no text of the knowledge base holds (a retrieval query's CJK
    run is what the knowledge base's tokenizer caches)."""
    rng = random.Random(uuid.uuid4().int)
    return "".join(chr(0x4E00 + rng.randrange(0x5000)) for _ in range(8))


async def converse(client: AsyncTestClient[Litestar], thread: str, marker: str, cjk: str) -> None:
    """Four turns naming the markers, in English and Chinese."""
    for turn in range(4):
        if turn % 2:
            await run(client, thread, f"我的名字是{cjk}牙科治疗包括吗？")
        else:
            await run(client, thread, f"My name is {marker}. Is dental treatment covered?{FILLER}")


def held(*markers: str) -> list[str]:
    return [found for marker in markers for found in holding(marker, besides=markers)]


@EVERY_PROFILE
async def test_after_an_erasure_no_process_cache_holds_the_users_text(
    make_app: AppFactory, auth: dict[str, str]
) -> None:
    user = f"erin-{uuid.uuid4().hex[:8]}"
    marker, cjk, kept = latin_marker(), cjk_marker(), latin_marker()
    async with AsyncTestClient[Litestar](make_app(**SMALL), timeout=30) as client:
        client.headers.update({**auth, "X-User-Id": user})
        await converse(client, "policy", marker, cjk)
        await converse(client, "claims", marker, cjk)
        client.headers.update({"X-User-Id": "another-user"})  # whose text may stay cached
        await converse(client, "theirs", kept, cjk_marker())
        assert held(marker), "the caches hold the text: otherwise the test could not fail"
        assert held(cjk)
        assert held(kept)

        client.headers.update({"X-User-Id": user})
        receipt = await client.delete(f"/v1/users/{user}")
        assert receipt.status_code == 200, receipt.text
        assert set(receipt.json()["remaining"].values()) == {0}, receipt.json()
        del receipt

        left = held(marker, cjk)
        assert not left, "\n".join(left)


@EVERY_PROFILE
async def test_after_a_thread_is_deleted_no_process_cache_holds_its_text(
    make_app: AppFactory, auth: dict[str, str]
) -> None:
    marker, cjk = latin_marker(), cjk_marker()
    async with AsyncTestClient[Litestar](make_app(**SMALL), timeout=30) as client:
        client.headers.update(auth)
        await converse(client, "deleted", marker, cjk)
        await converse(client, "kept", latin_marker(), cjk_marker())
        assert held(marker), "the caches hold the text: otherwise the test could not fail"

        deleted = await client.delete("/v1/threads/deleted")
        assert deleted.status_code == 204, deleted.text
        del deleted

        left = held(marker, cjk)
        assert not left, "\n".join(left)


BOUND = 1 << 20
"""Each cache's byte bound in the test (1 MiB): the runs below give each far more."""
BOUNDS = [
    ("threadkeeper.adapters.sql", "RECENT_TEXT_BYTES"),
    ("threadkeeper.adapters.ledger", "CACHE_BYTES"),
    ("threadkeeper.domain.tokens", "IDENTITY_BYTES"),
    ("threadkeeper.domain.tokens", "SLICE_BYTES"),
    ("threadkeeper.domain.tokens", "SYSTEM_CACHE_BYTES"),
    ("threadkeeper.domain.history", "INDEXED_BYTES"),
    ("threadkeeper.app.state", "KEPT_BYTES"),
]


def caches() -> dict[str, list[Any]]:
    """Every cache of this process that a run can fill with a user's text, by name."""
    from threadkeeper.adapters import builtin_model
    from threadkeeper.adapters.knowledge import tokenizer
    from threadkeeper.adapters.ledger import MessageLedger
    from threadkeeper.adapters.serde import MessageMemo
    from threadkeeper.adapters.sql import texts as sql_texts
    from threadkeeper.app import state
    from threadkeeper.domain.history import TurnIndexes
    from threadkeeper.domain.tokens import TokenCounter

    found: dict[str, list[Any]] = {
        "adapters.sql recent texts": [sql_texts._recent_texts],
        "builtin model terms": [builtin_model._terms],
        "builtin model estimates": [builtin_model._ESTIMATED],
        "builtin model windows": [builtin_model._WINDOWS],
        "merge indexes": [state._INDEXES, state._BY_FIRST],
        "knowledge tokenizer": [tokenizer._cjk_tokens, tokenizer._word_token],
        "ledger messages": [],
        "ledger hot lists": [],
        "message memo": [],
        "token counter messages": [],
        "token counter system texts": [],
        "turn indexes": [],
    }
    for obj in gc.get_objects():
        if isinstance(obj, MessageLedger):
            found["ledger messages"].append(obj._messages)
            found["ledger hot lists"].append(obj._hot)
        elif isinstance(obj, MessageMemo):
            found["message memo"].append(obj._memo)
        elif isinstance(obj, TokenCounter):
            found["token counter messages"].append(obj._objects)
            found["token counter system texts"].append(obj._system_cache)
        elif isinstance(obj, TurnIndexes):
            found["turn indexes"].append(obj)
    return found


@EMBEDDED
async def test_every_cache_stays_under_its_byte_bound(
    make_app: AppFactory, auth: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """200 runs of ~11 KB (2.2 MB of text, held several times over by the caches before they
    were bounded by bytes): each cache grows by at most its bound (1 MiB here), with room for
    what the estimate of a message's size leaves out."""
    import importlib

    from threadkeeper.adapters.serde import MessageMemo

    for module, name in BOUNDS:
        monkeypatch.setattr(importlib.import_module(module), name, BOUND, raising=False)
    async with AsyncTestClient[Litestar](make_app(), timeout=60) as client:
        client.headers.update(auth)
        await run(client, "warm-up", "Is dental treatment covered?")
        for memo in (o for o in gc.get_objects() if isinstance(o, MessageMemo)):
            monkeypatch.setattr(memo, "_budget", BOUND)
        before = {name: deep_size(*roots) for name, roots in caches().items()}
        for turn in range(200):
            words = " ".join(uuid.uuid4().hex for _ in range(330))  # ~11 KB, every word new
            await run(client, f"t{turn // 4}", f"Is dental treatment covered? {words}")
        after = {name: deep_size(*roots) for name, roots in caches().items()}
    grown = {name: after[name] - before.get(name, 0) for name in after}
    over = {name: size for name, size in grown.items() if size > BOUND * 3 // 2}
    assert not over, f"grew past the bound: {over}; every cache: {grown}"
