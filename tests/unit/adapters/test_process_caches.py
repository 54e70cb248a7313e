"""The adapters' process caches that can hold a user's text (issue 26, item 11): bounded by
bytes, and emptied of a deleted thread's (an erased user's) text — the message ledger's
objects (every one of the thread, not only those its newest checkpoint names), the recent
texts of ``adapters.sql``, the checkpoint serializer's memo; the knowledge base's tokenizer
keeps nothing of a query."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langgraph.checkpoint.base import empty_checkpoint

from tests.support.heap import deep_size
from threadkeeper.adapters.embedded import EmbeddedBackend
from threadkeeper.adapters.embedded.ledger import SqliteRows
from threadkeeper.adapters.knowledge import KnowledgeBase, tokenizer
from threadkeeper.adapters.ledger import CHANNEL, MessageLedger
from threadkeeper.adapters.serde import MessageMemo, StoredTypesHook, checkpoint_serializer
from threadkeeper.adapters.sql import texts as sql_texts
from threadkeeper.domain import caches


def ledger_over(backend: EmbeddedBackend, **bounds: Any) -> MessageLedger:
    """A ledger of its own (its cache bounds given) over the embedded profile's saver."""
    return MessageLedger(
        backend.sqlite,
        SqliteRows(backend.runs),
        whole_checkpoints=True,
        buffered_lists=True,
        **bounds,
    )


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


async def put(ledger: MessageLedger, thread: str, messages: list[BaseMessage]) -> None:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {CHANNEL: messages}
    checkpoint["channel_versions"] = {CHANNEL: 1}
    metadata: Any = {"source": "loop", "step": 0, "parents": {}}
    await ledger.aput(config(thread), checkpoint, metadata, {CHANNEL: 1})


def cached_text(ledger: MessageLedger) -> str:
    """Everything the ledger caches, as text (its message objects and hot lists)."""
    return repr(list(ledger._messages.values())) + repr(list(ledger._hot.values()))


async def test_a_deleted_threads_messages_all_leave_the_ledgers_cache(
    backend: EmbeddedBackend,
) -> None:
    """Those its newest checkpoint still names, one replaced since (no longer in the thread's
    head), and those of a thread whose entry the cache evicted (``cache_threads``)."""
    ledger = ledger_over(backend, cache_threads=1)
    marker, kept = f"zq{uuid.uuid4().hex}", f"kept{uuid.uuid4().hex}"
    question = HumanMessage(f"my name is {marker}", id="q1")
    await put(ledger, "doomed", [question, AIMessage(f"hello {marker}", id="a1")])
    replaced = AIMessage("hello there", id="a1")  # the answer replaced: its old row unnamed
    await put(ledger, "doomed", [question, replaced])
    await put(ledger, "other", [HumanMessage(kept, id="q2")])  # evicts doomed's thread entry
    assert marker in cached_text(ledger)

    await ledger.adelete_thread("doomed")

    assert marker not in cached_text(ledger)
    assert kept in cached_text(ledger)  # another thread's stay


async def test_the_ledgers_cache_stays_under_its_byte_bound(backend: EmbeddedBackend) -> None:
    bound = 256 << 10
    ledger = ledger_over(backend, cache_bytes=bound)
    for turn in range(60):  # ~11 KB each, 660 KB in all
        history: list[BaseMessage] = [
            HumanMessage(uuid.uuid4().hex * 340, id=f"m{turn}-{i}") for i in range(2)
        ]
        await put(ledger, f"t{turn}", history)
    assert ledger.cached_bytes <= 2 * bound  # the message cache and the hot lists
    assert deep_size(ledger._messages) <= bound * 3 // 2
    assert deep_size(ledger._hot) <= bound * 3 // 2


def test_the_recent_texts_are_bounded_by_bytes_and_forgotten(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sql_texts, "_recent_texts", sql_texts.RecentTexts())
    monkeypatch.setattr(sql_texts, "RECENT_TEXT_BYTES", 100_000)
    texts = sql_texts._recent_texts
    for i in range(40):
        texts.remember((f"acme:u{i % 3}:t{i}", f"u{i % 3}", "summary"), f"d{i}", "x" * 11_000)
    assert texts.size <= 100_000
    assert len(texts) == 9  # the newest that fit
    texts.remember(("acme:u9:big", "u9", "summary"), "big", "y" * 200_000)  # over the bound
    assert texts.get(("acme:u9:big", "u9", "summary")) is None

    caches.forget(threads=["acme:u0:t39"])
    assert texts.get(("acme:u0:t39", "u0", "summary")) is None
    assert texts.get(("acme:u1:t37", "u1", "summary")) is not None
    caches.forget(user=("acme", "u1"))
    assert not [key for key in list(texts._texts) if key[1] == "u1"]
    assert [key for key in list(texts._texts) if key[1] == "u2"]


def test_the_message_memo_is_emptied_by_a_deletion() -> None:
    serde = checkpoint_serializer()
    marker = f"zq{uuid.uuid4().hex}"
    _, data = serde.dumps_typed([HumanMessage(f"my name is {marker}", id="q1")])
    assert serde.loads_typed(("msgpack", data))[0].content.endswith(marker)
    assert len(serde.memo) == 1
    caches.forget(threads=["acme:u1:t1"])
    assert len(serde.memo) == 0
    memo = MessageMemo(StoredTypesHook())
    memo.keep(b"x" * 64, HumanMessage("kept until a deletion"))
    caches.forget(user=("acme", "u1"))
    assert len(memo) == 0


def test_a_query_leaves_nothing_in_the_tokenizers_caches() -> None:
    kb = KnowledgeBase.from_directory()
    tenant = next(iter(kb.tenants()))
    kb.search(tenant, "Is dental treatment covered?", k=3)  # the index built, its words read
    words, runs = tokenizer._word_token.cache_info(), tokenizer._cjk_tokens.cache_info()
    marker = f"zq{uuid.uuid4().hex[:12]}"
    kb.search(tenant, f"My name is {marker}, 我的名字是张伟伟伟, is dental covered?", k=3)
    assert tokenizer._word_token.cache_info().currsize == words.currsize
    assert tokenizer._cjk_tokens.cache_info().currsize == runs.currsize
    # the same tokens as the cached path gives
    text = f"Fillings {marker} 种植牙费用"
    assert tokenizer.tokenize(text, remember=False) == tokenizer.tokenize(text)
