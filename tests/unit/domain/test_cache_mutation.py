"""The identity caches rest on "messages are values"; ``caches.check_mutations`` (on for every
test suite, ``tests/conftest.py``) makes a message changed in place fail where a cache hands it
back, instead of a stale count or stale bytes being served."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from threadkeeper.adapters.serde import MemoSerializer
from threadkeeper.domain import caches
from threadkeeper.domain.caches import CachedMessageMutated
from threadkeeper.domain.tokens import IdentityMemo


@pytest.fixture
def checking() -> Iterator[None]:
    caches.check_mutations(True)
    yield
    caches.check_mutations(os.environ.get("THREADKEEPER_TEST_CHECK_MUTATIONS", "1") != "0")


@pytest.mark.skipif(
    os.environ.get("THREADKEEPER_TEST_CHECK_MUTATIONS") == "0", reason="turned off for this run"
)
def test_the_suites_run_with_the_check_on() -> None:
    assert caches.fingerprint(HumanMessage("hi")) is not None


def test_content_blocks_changed_in_place_fail_the_identity_memo(checking: None) -> None:
    memo: IdentityMemo[int] = IdentityMemo()
    message = HumanMessage([{"type": "text", "text": "my policy number is 12"}])
    memo.put(message, 7)
    assert memo.get(message) == 7
    message.content[0]["text"] = "my policy number is 99"  # type: ignore[index]
    with pytest.raises(CachedMessageMutated, match="changed in place"):
        memo.get(message)


def test_tool_calls_changed_in_place_fail_the_serializer_memo(
    checking: None, caplog: pytest.LogCaptureFixture
) -> None:
    serde = MemoSerializer()
    answer = AIMessage(
        "", id="a1", tool_calls=[{"name": "fetch_faq_document", "args": {"doc": "d1"}, "id": "c1"}]
    )
    typed = serde.dumps_typed([answer])
    first = serde.loads_typed(typed)[0]
    assert serde.loads_typed(typed)[0] is first  # handed out again, not decoded again
    first.tool_calls[0]["args"]["doc"] = "d2"
    # raised inside the msgpack decoder's ext hook, which replaces it with its own ValueError:
    # the line logged names it
    with pytest.raises((CachedMessageMutated, ValueError)):
        serde.loads_typed(typed)
    assert "held by the checkpoint serializer's memo was changed in place" in caplog.text


def test_a_replaced_message_is_no_mutation(checking: None) -> None:
    memo: IdentityMemo[int] = IdentityMemo()
    message = HumanMessage("first")
    memo.put(message, 1)
    changed = message.model_copy(update={"content": "second"})
    assert memo.get(changed) is None  # another object: computed afresh
    assert memo.get(message) == 1


def test_off_the_check_costs_nothing_and_sees_nothing() -> None:
    caches.check_mutations(False)
    try:
        assert caches.fingerprint(HumanMessage("hi")) is None
        memo: IdentityMemo[int] = IdentityMemo()
        message = HumanMessage([{"type": "text", "text": "a"}])
        memo.put(message, 1)
        message.content[0]["text"] = "b"  # type: ignore[index]
        assert memo.get(message) == 1  # the stale value: what the check exists to catch
    finally:
        caches.check_mutations(os.environ.get("THREADKEEPER_TEST_CHECK_MUTATIONS", "1") != "0")
