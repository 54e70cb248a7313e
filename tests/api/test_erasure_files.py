"""An erasure leaves no byte of the user in the embedded profile's SQLite files, the
write-ahead log included (issue 26: an erased feedback comment, thread keys and memory values
were read from the ``-wal`` file after the receipt, and erased messages recovered from its
pages). The distinctive values are first seen in the files — so the test can fail — then
gone once the receipt is given."""

from __future__ import annotations

from pathlib import Path

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.api.conftest import AppFactory, run

pytestmark = pytest.mark.parametrize("profile", ["embedded"], indirect=True)


def files(data: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(data.glob("threadkeeper.sqlite3*")))


async def test_after_an_erasure_no_sqlite_file_holds_the_users_values(
    make_app: AppFactory, auth: dict[str, str], tmp_path: Path
) -> None:
    user, thread = "erin-7f3a9c", "policy-thread-9b1d"
    comment = "feedback-zq8w-the-erased-comment-text"
    headers = {**auth, "X-User-Id": user}
    async with AsyncTestClient[Litestar](make_app(), timeout=30) as client:
        client.headers.update(headers)
        for text in ("I am married with two children", "Is dental treatment covered?"):
            body = await run(client, thread, text)
        stored = await client.post(
            f"/v1/threads/{thread}/runs/{body['run_id']}/feedback",
            json={"score": 1, "comment": comment},
        )
        assert stored.status_code == 204, stored.text
        memory = (await client.get(f"/v1/users/{user}/memory")).json()
        values = [item["value"].encode() for item in memory["profile"] + memory["facts"]]
        assert values, "a fact was remembered"
        distinctive = [user.encode(), thread.encode(), comment.encode()]
        before = files(tmp_path / "data")
        for value in distinctive:
            assert value in before, value  # otherwise the test could not fail

        receipt = await client.delete(f"/v1/users/{user}")
        assert receipt.status_code == 200, receipt.text
        assert set(receipt.json()["remaining"].values()) == {0}, receipt.json()

        after = files(tmp_path / "data")
        for value in distinctive:
            assert value not in after, value
        assert (tmp_path / "data" / "threadkeeper.sqlite3-wal").stat().st_size == 0
