"""The redis-mysql round names its MySQL session without asking the server each time
(``rounds.session_id``: the driver's handshake id), and that name is the session ``KILL``
ends when a commit is in doubt — for a fresh connection, a pooled one taken again, and one
the pool replaced after its session was killed."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from tests.support.mysql import fresh_database
from threadkeeper.adapters.redis_mysql.backend import _engine
from threadkeeper.adapters.redis_mysql.rounds import session_id

pytestmark = pytest.mark.integration

ASK = text("SELECT CONNECTION_ID()")


async def test_the_session_id_is_the_servers_connection_id_across_reuse_and_replacement() -> None:
    with fresh_database(migrate=False) as url:
        engine = _engine(url)
        try:
            seen = []
            for _ in range(3):  # the same pooled connection, taken again
                async with engine.connect() as conn:
                    ours = await session_id(conn)
                    assert ours == (await conn.execute(ASK)).scalar_one()
                    seen.append(ours)
            assert len(set(seen)) == 1, seen

            async with engine.connect() as held, engine.connect() as other:
                killed = await session_id(held)
                await other.execute(text(f"KILL CONNECTION {killed}"))
                with pytest.raises(DBAPIError):  # the held connection's session is gone
                    await held.execute(text("SELECT 1"))
            async with engine.connect() as conn:  # the pool's replacement: a new session
                ours = await session_id(conn)
                assert ours == (await conn.execute(ASK)).scalar_one()
                assert ours != killed
        finally:
            await engine.dispose()
