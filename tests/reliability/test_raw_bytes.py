"""Raw bytes into every route that takes a body: never a server error.

Issue 9: invalid UTF-8 inside a JSON string (a run's content, a feedback comment) answered
500 ``UnicodeDecodeError``. Hypothesis writes bodies that are almost right — the contract's
JSON with bytes spliced into its strings: invalid UTF-8, overlong encodings, encoded
surrogates, NUL and other control characters, truncations — and plain random bytes, and
posts them to ``POST /v1/threads/{id}/runs`` and ``POST …/runs/{run_id}/feedback`` of the real
application on each profile. Every answer must be a 2xx or a 4xx problem+json.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.reliability.conftest import sized

SPLICES = [
    b"\xff",
    b"\xfe\xfe",
    b"\xc0\xaf",  # overlong "/"
    b"\xe0\x80\xaf",  # overlong "/", three bytes
    b"\xf0\x80\x80\xaf",  # overlong "/", four bytes
    b"\xed\xa0\x80",  # an encoded UTF-16 surrogate
    b"\xf4\x90\x80\x80",  # above U+10FFFF
    b"\xc3",  # a truncated sequence
    b"\x00",
    b"\\u0000",
    b"\x1b[31m",
    b"\\ud800",  # a lone surrogate escape
    b"\r\n",
    b'"',
    b"\\",
]

TEMPLATES = [
    (b'{"message": {"content": "', b'"}}'),
    (b'{"message": {"content": "hi", "id": "', b'"}}'),
    (b'{"message": {"content": "hi"}, "run_id": "', b'"}'),
    (b'{"score": 1, "comment": "', b'"}'),
]

bodies = st.one_of(
    st.binary(max_size=300),
    st.builds(
        lambda template, parts, cut: (template[0] + b"".join(parts) + template[1])[
            : cut if cut else None
        ],
        st.sampled_from(TEMPLATES),
        st.lists(
            st.one_of(st.sampled_from(SPLICES), st.binary(max_size=8), st.just(b"dental")),
            max_size=6,
        ),
        st.one_of(st.none(), st.integers(min_value=1, max_value=60)),
    ),
)

EXAMPLES = sized(150, 1000)


@pytest.fixture
async def raw_client(
    make_app: Any, auth: dict[str, str]
) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(make_app(), timeout=30) as client:
        client.headers.update(auth)
        yield client


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    database=None,
)
@given(body=bodies, route=st.sampled_from(["run", "feedback"]))
async def test_raw_bytes_never_get_a_server_error(
    raw_client: AsyncTestClient[Litestar], body: bytes, route: str
) -> None:
    path = "/v1/threads/fuzz/runs"
    if route == "feedback":
        path = f"/v1/threads/fuzz/runs/{uuid.uuid4()}/feedback"
    response = await raw_client.post(
        path,
        content=body,
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    assert response.status_code < 500, (body, response.status_code, response.text)
    if response.status_code >= 400:
        assert response.headers["content-type"].startswith("application/problem+json")
