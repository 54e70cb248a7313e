"""The postgres ledger's messages in their compact form (``adapters.ledger_codec``).

Rows of ``tk_checkpoint_messages`` written before hold each message in
``JsonPlusSerializer``'s form (``type = 'msgpack'``: LangChain's constructor form, every field
under its full name). This revision rewrites each such row that holds one message as the codec
writes it (``tk1`` / ``tk1z``: the non-default fields, compressed when shorter), in batches,
keeping its ``seq`` — a ``seq`` names one immutable message, and the rewritten row decodes to
an equal message (the codec checks that for every row; a row it cannot hold exactly, or that
does not decode at all, stays as it is). The ledger reads rows of either form, so a row this
revision did not reach, or one a replica still on 0006's code writes meanwhile, still reads (the
other way round does not hold: stop every replica before migrating, docs/operations.md).

``downgrade`` writes the rows back in the serializer's form, which the code of 0006 reads.

No DDL: ``type`` (``VARCHAR(32)``) already says which form a row's ``body`` has.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"

BATCH = 500

_messages = sa.table(
    "tk_checkpoint_messages",
    sa.column("seq", sa.BigInteger),
    sa.column("type", sa.String),
    sa.column("body", sa.LargeBinary),
)


def _rewrite(
    types: tuple[str, ...], convert: Callable[[str, bytes], tuple[str, bytes] | None]
) -> int:
    """Rewrite the rows whose ``type`` is one of ``types`` with ``convert``, ``BATCH`` at a
    time in ``seq`` order; the rows rewritten."""
    bind = op.get_bind()
    after, changed = -1, 0
    while True:
        rows = bind.execute(
            sa.select(_messages.c.seq, _messages.c.type, _messages.c.body)
            .where(_messages.c.type.in_(types), _messages.c.seq > after)
            .order_by(_messages.c.seq)
            .limit(BATCH)
        ).all()
        if not rows:
            return changed
        updates: list[dict[str, Any]] = []
        for seq, type_, body in rows:
            converted = convert(str(type_), bytes(body))
            if converted is not None:
                updates.append(
                    {"key": int(seq), "new_type": converted[0], "new_body": converted[1]}
                )
        if updates:
            bind.execute(
                _messages.update()
                .where(_messages.c.seq == sa.bindparam("key"))
                .values(type=sa.bindparam("new_type"), body=sa.bindparam("new_body")),
                updates,
            )
            changed += len(updates)
        after = int(rows[-1][0])


def upgrade() -> None:
    from langchain_core.messages import BaseMessage

    from threadkeeper.adapters import ledger_codec as codec
    from threadkeeper.adapters.serde import checkpoint_serializer

    serde = checkpoint_serializer()

    def compact(type_: str, body: bytes) -> tuple[str, bytes] | None:
        try:
            message = serde.loads_typed((type_, body))
        except Exception:  # a row that does not decode is left as it was (the ledger reports it)
            return None
        if not isinstance(message, BaseMessage):
            return None
        stored = codec.encode(message, serde, verify=True)
        return stored if stored[0] in codec.FORMATS else None

    _rewrite(("msgpack",), compact)


def downgrade() -> None:
    from threadkeeper.adapters import ledger_codec as codec
    from threadkeeper.adapters.serde import checkpoint_serializer

    serde = checkpoint_serializer()

    def legacy(type_: str, body: bytes) -> tuple[str, bytes] | None:
        try:
            return serde.dumps_typed(codec.decode(type_, body, serde))
        except Exception:  # as on the way up: a row that does not decode is left as it was
            return None

    _rewrite(codec.FORMATS, legacy)
