"""The redis-mysql memory store matches namespace prefixes on whole labels, literally: the
statements ``ExactMyStore`` sends (the behaviour on MariaDB is the isolation suite's,
``tests/integration/test_backend_conformance.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.store.base import ListNamespacesOp, MatchCondition, SearchOp

from threadkeeper.adapters.redis_mysql.store import (
    ExactMyStore,
    StoreStatementChanged,
    like_literal,
)


def store() -> ExactMyStore:
    """A store that only builds statements (no connection, no batching task)."""
    made = object.__new__(ExactMyStore)
    made._task = None
    return made


def test_a_search_is_the_namespace_or_below_it_with_wildcards_escaped() -> None:
    [(query, params)] = store()._prepare_batch_search_queries(
        [(0, SearchOp(("acme", "user", "u_1%!"), limit=5))]
    )
    assert "prefix = %s OR prefix LIKE %s ESCAPE '!'" in query
    assert "LIKE %s\n" not in query.replace("ESCAPE '!'", "")  # no other prefix match
    assert params[:2] == ["acme.user.u_1%!", "acme.user.u!_1!%!!.%"]
    assert params[-2:] == [5, 0]


def test_a_namespace_listing_matches_whole_labels() -> None:
    [(query, params)] = store()._get_batch_list_namespaces_queries(
        [(0, ListNamespacesOp((MatchCondition("prefix", ("acme", "user", "w_1")),), None, 10))]
    )
    assert "(prefix = %s OR prefix LIKE %s ESCAPE '!')" in query
    assert params == (None, None, "acme.user.w_1", "acme.user.w!_1.%", 10, 0)


def test_a_wildcard_label_is_refused_not_matched_loosely() -> None:
    with pytest.raises(NotImplementedError):
        store()._get_batch_list_namespaces_queries(
            [(0, ListNamespacesOp((MatchCondition("prefix", ("acme", "*")),), None, 10))]
        )


def test_a_changed_library_statement_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from langgraph.store.mysql.asyncmy import AsyncMyStore

    def changed(self: Any, ops: Any) -> list[tuple[str, list[Any]]]:
        return [("SELECT * FROM store WHERE prefix GLOB %s", ["x*"]) for _ in ops]

    monkeypatch.setattr(AsyncMyStore, "_prepare_batch_search_queries", changed)
    with pytest.raises(StoreStatementChanged):
        store()._prepare_batch_search_queries([(0, SearchOp(("a",)))])


@pytest.mark.parametrize("text", ["plain", "a_b", "a%b", "a!b", "!_%", ""])
def test_like_literal_escapes_every_metacharacter(text: str) -> None:
    import re

    escaped = like_literal(text)
    # read back as LIKE would read it: '!' escapes the next character
    pattern = "".join(
        re.escape(m[1])
        if m.startswith("!")
        else ("." if m == "_" else ".*" if m == "%" else re.escape(m))
        for m in re.findall(r"!.|.", escaped, flags=re.S)
    )
    assert re.fullmatch(pattern, text, flags=re.S)
    assert not re.fullmatch(pattern, text + "x", flags=re.S)
