"""The memory store of the redis-mysql profile: ``AsyncMyStore`` with namespace prefixes that
match whole labels, literally.

``langgraph-checkpoint-mysql`` 3.0.0 finds a search's items, and a ``list_namespaces``'s
namespaces, with ``prefix LIKE '<namespace>%'``: ``_`` and ``%`` in a label are wildcards and
nothing marks where a label ends, so user ``u1``'s search also returns ``u10``'s and
``u1-2``'s items, and ``u_1``'s returns ``uX1``'s (issue 26: memory read across users and
tenants, a reset deleting another user's memory, an erasure looping forever). Its PostgreSQL
and SQLite siblings fixed this upstream (an escaped ``LIKE`` with the ``.`` separator, or
equality); :class:`ExactMyStore` does the same here: ``prefix = ns OR prefix LIKE 'ns.%'``
with ``ns`` escaped, so a search returns the namespace and its descendants and nothing else.
Everything else is the library's. The rewrite checks that the library's statement still has
the shape it rewrites and refuses to run otherwise (an upgrade that changed it fails loudly,
never silently matching by prefix again).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langgraph.store.base import ListNamespacesOp, SearchOp
from langgraph.store.mysql.asyncmy import AsyncMyStore

ESCAPE = "!"
"""The ``LIKE`` escape character (not the backslash, whose meaning in a MySQL string literal
depends on ``NO_BACKSLASH_ESCAPES``)."""
_SEARCH_PREFIX = "WHERE prefix LIKE %s"
_EXACT_OR_BELOW = f"WHERE (prefix = %s OR prefix LIKE %s ESCAPE '{ESCAPE}')"


class StoreStatementChanged(RuntimeError):
    """The library's search statement no longer has the shape :class:`ExactMyStore` rewrites."""


def like_literal(text: str) -> str:
    """``text`` as a ``LIKE`` pattern matching exactly it (escaped with ``ESCAPE``)."""
    return (
        text.replace(ESCAPE, ESCAPE + ESCAPE).replace("%", ESCAPE + "%").replace("_", ESCAPE + "_")
    )


def namespace_text(namespace: Sequence[str]) -> str:
    """A namespace as the store's ``prefix`` column holds it (labels joined by ``.``)."""
    return ".".join(namespace)


def exact_or_below(namespace: Sequence[str]) -> tuple[str, str]:
    """The two parameters of ``_EXACT_OR_BELOW`` for ``namespace``."""
    text = namespace_text(namespace)
    return text, like_literal(text) + ".%"


class ExactMyStore(AsyncMyStore):
    """``AsyncMyStore`` whose prefix matches are whole labels, literally (module docstring)."""

    def _prepare_batch_search_queries(
        self, search_ops: Sequence[tuple[int, SearchOp]]
    ) -> list[tuple[str, Sequence[Any]]]:
        queries = super()._prepare_batch_search_queries(search_ops)
        rewritten: list[tuple[str, Sequence[Any]]] = []
        for (query, params), (_, op) in zip(queries, search_ops, strict=True):
            if query.count(_SEARCH_PREFIX) != 1 or query.count("%s") < 1:
                raise StoreStatementChanged(
                    "langgraph-checkpoint-mysql's search statement changed: "
                    "ExactMyStore cannot scope it to a namespace"
                )
            head, tail = query.split(_SEARCH_PREFIX)
            if "%s" in head:
                raise StoreStatementChanged("a parameter before the namespace prefix")
            rewritten.append(
                (head + _EXACT_OR_BELOW + tail, [*exact_or_below(op.namespace_prefix), *params[1:]])
            )
        return rewritten

    def _get_batch_list_namespaces_queries(
        self, list_ops: Sequence[tuple[int, ListNamespacesOp]]
    ) -> list[tuple[str, Sequence[Any]]]:
        """The library's statement, its match conditions on whole labels: a prefix or a
        suffix of labels, literally (``*``, one label of any value, is not supported)."""
        queries: list[tuple[str, Sequence[Any]]] = []
        for _, op in list_ops:
            query = """
                SELECT truncated_prefix, MIN(prefix)
                FROM (
                    SELECT
                        prefix,
                        CASE
                            WHEN %s IS NOT NULL THEN
                                SUBSTRING_INDEX(prefix, '.', %s)
                            ELSE prefix
                        END AS truncated_prefix
                    FROM store
            """
            params: list[Any] = [op.max_depth, op.max_depth]
            conditions = []
            for condition in op.match_conditions or ():
                if "*" in condition.path:
                    raise NotImplementedError("a '*' label in a namespace match")
                text = namespace_text(condition.path)
                if condition.match_type == "prefix":
                    conditions.append(f"(prefix = %s OR prefix LIKE %s ESCAPE '{ESCAPE}')")
                    params += [text, like_literal(text) + ".%"]
                elif condition.match_type == "suffix":
                    conditions.append(f"(prefix = %s OR prefix LIKE %s ESCAPE '{ESCAPE}')")
                    params += [text, "%." + like_literal(text)]
                else:
                    raise ValueError(f"unknown namespace match type {condition.match_type!r}")
            if conditions:
                query += " WHERE " + " AND ".join(conditions)
            query += ") AS subquery GROUP BY truncated_prefix"
            query += " ORDER BY truncated_prefix LIMIT %s OFFSET %s"
            params += [op.limit, op.offset]
            queries.append((query, tuple(params)))
        return queries
