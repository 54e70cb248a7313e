"""The HTTP contract (DESIGN "HTTP contract"), line by line, over the in-memory service fake."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio
import httpx
import jsonschema_rs
import pytest
import uvicorn
from httpx_sse import aconnect_sse
from litestar import Litestar
from litestar.testing import AsyncTestClient, TestClient

from tests.support.fake_service import (
    CITATION,
    DELTAS,
    RETRIEVAL,
    FakeThreadService,
    answer_to,
)
from threadkeeper.app.http import HttpSettings, create_http_app
from threadkeeper.app.http.auth import TokenTable, bearer_token
from threadkeeper.app.http.negotiation import JSON, SSE, choose_representation
from threadkeeper.app.http.schemas import ID_PATTERN, NOT_BLANK_PATTERN, THREAD_ID_PATTERN, exact
from threadkeeper.app.http.sse import KEEP_ALIVE, EventRelay, encode_event
from threadkeeper.app.service import MAX_MESSAGE_BYTES, Caller, RunEvent, Unavailable
from threadkeeper.domain.errors import MessageTooLarge, ThreadBusy
from threadkeeper.domain.threads import stored_user_id

TOKEN = "s3cret-token"
LIMITED_TOKEN = "acme-only-token"
CALLER = Caller("acme", "u1")
HEADERS = {"Authorization": f"Bearer {TOKEN}", "X-Tenant-Id": "acme", "X-User-Id": "u1"}
PROBLEM = "application/problem+json"
RUN_ID = "6f1c1a52-54a4-4f5e-9a43-2f7d1f0e2a11"

# Every /v1 route: (method, path, json body or None)
V1_ROUTES: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/v1/threads/t1/runs", {"message": {"content": "hi"}}),
    ("GET", "/v1/threads/t1/messages", None),
    ("DELETE", "/v1/threads/t1", None),
    ("POST", f"/v1/threads/t1/runs/{RUN_ID}/feedback", {"score": 1}),
    ("GET", "/v1/users/u1/memory", None),
    ("DELETE", "/v1/users/u1/memory", None),
    ("DELETE", "/v1/users/u1", None),
]
OPS_ROUTES = ["/health/live", "/health/ready", "/schema/openapi.json", "/metrics"]


def settings(**overrides: Any) -> HttpSettings:
    values: dict[str, Any] = {
        "service_token": TOKEN,
        "service_tokens": {LIMITED_TOKEN: ["acme", "acme-eu"]},
        "require_token": True,
    }
    return HttpSettings(**(values | overrides))


@pytest.fixture
def service() -> FakeThreadService:
    return FakeThreadService()


@pytest.fixture
def app(service: FakeThreadService) -> Litestar:
    return create_http_app(service, settings())


@pytest.fixture
async def client(app: Litestar) -> AsyncIterator[AsyncTestClient[Litestar]]:
    async with AsyncTestClient(app) as client:
        yield client


@pytest.fixture
def sync_client(app: Litestar) -> Iterator[TestClient[Litestar]]:
    with TestClient(app) as client:
        yield client


def headers(**changes: str | None) -> dict[str, str]:
    """``HEADERS`` with some replaced (``None`` removes one); keys use ``_`` for ``-``."""
    result = dict(HEADERS)
    for name, value in changes.items():
        header = name.replace("_", "-")
        if value is None:
            result.pop(header, None)
        else:
            result[header] = value
    return result


def assert_problem(
    response: httpx.Response, status: int, type_: str | None = None
) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM)
    body: dict[str, Any] = response.json()
    assert body["status"] == status
    assert isinstance(body["type"], str)
    assert isinstance(body["title"], str)
    assert isinstance(body["detail"], str)
    if type_ is not None:
        assert body["type"] == (
            type_ if type_ == "about:blank" else f"urn:threadkeeper:problem:{type_}"
        )
    return body


def assert_invalid(response: httpx.Response, key: str, source: str) -> None:
    body = assert_problem(response, 422, "invalid-request")
    assert any(e.get("key") == key and e.get("source") == source for e in body["errors"]), body


def parse_sse(text: str) -> list[tuple[str, Any]]:
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in fields:
            events.append((fields["event"], json.loads(fields["data"])))
    return events


def started_runs(service: FakeThreadService) -> list[Any]:
    return [args for name, args in service.calls if name == "start_run"]


async def run(
    client: AsyncTestClient[Litestar],
    content: str = "hello there",
    *,
    thread: str = "t1",
    accept: str | None = None,
    **body: Any,
) -> httpx.Response:
    extra = {"Accept": accept} if accept is not None else {}
    return await client.post(
        f"/v1/threads/{thread}/runs",
        json={"message": {"content": content}, **body},
        headers=headers() | extra,
    )


# --- authentication ---------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "body"), V1_ROUTES)
@pytest.mark.parametrize(
    "authorization", [None, "Bearer wrong", f"Basic {TOKEN}", "Bearer", f"Bearer {TOKEN}x"]
)
async def test_every_v1_route_needs_the_service_token(
    client: AsyncTestClient[Litestar],
    service: FakeThreadService,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    authorization: str | None,
) -> None:
    response = await client.request(
        method, path, json=body, headers=headers(Authorization=authorization)
    )
    assert_problem(response, 401, "about:blank")
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert service.calls == []


async def test_the_bearer_scheme_is_case_insensitive(client: AsyncTestClient[Litestar]) -> None:
    response = await client.get(
        "/v1/users/u1/memory", headers=headers(Authorization=f"bearer {TOKEN}")
    )
    assert response.status_code == 200


async def test_a_limited_token_acts_for_its_tenants_only(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    limited = f"Bearer {LIMITED_TOKEN}"
    for tenant in ("acme", "acme-eu"):
        ok = await client.get(
            "/v1/users/u1/memory", headers=headers(Authorization=limited, X_Tenant_Id=tenant)
        )
        assert ok.status_code == 200
    denied = await client.get(
        "/v1/users/u1/memory", headers=headers(Authorization=limited, X_Tenant_Id="globex")
    )
    assert_problem(denied, 403, "about:blank")
    assert [c for c in service.calls if c[1].tenant_id == "globex"] == []


async def test_the_single_token_acts_for_any_tenant(client: AsyncTestClient[Litestar]) -> None:
    response = await client.get("/v1/users/u1/memory", headers=headers(X_Tenant_Id="globex"))
    assert response.status_code == 200


async def test_a_wildcard_token_in_the_mapping_acts_for_any_tenant(
    service: FakeThreadService,
) -> None:
    app = create_http_app(service, settings(service_token=None, service_tokens={"w": ["*"]}))
    async with AsyncTestClient(app) as client:
        response = await client.get(
            "/v1/users/u1/memory", headers=headers(Authorization="Bearer w", X_Tenant_Id="globex")
        )
    assert response.status_code == 200


async def test_a_limited_token_with_a_malformed_tenant_gets_422_not_403(
    client: AsyncTestClient[Litestar],
) -> None:
    response = await client.get(
        "/v1/users/u1/memory",
        headers=headers(Authorization=f"Bearer {LIMITED_TOKEN}", X_Tenant_Id="not valid"),
    )
    assert_invalid(response, "X-Tenant-Id", "header")


async def test_embedded_without_a_token_needs_no_authorization(service: FakeThreadService) -> None:
    app = create_http_app(service, HttpSettings(require_token=False))
    async with AsyncTestClient(app) as client:
        response = await client.get("/v1/users/u1/memory", headers=headers(Authorization=None))
    assert response.status_code == 200


async def test_a_configured_token_is_required_even_when_not_mandatory(
    service: FakeThreadService,
) -> None:
    app = create_http_app(service, settings(require_token=False))
    async with AsyncTestClient(app) as client:
        missing = await client.get("/v1/users/u1/memory", headers=headers(Authorization=None))
        present = await client.get("/v1/users/u1/memory", headers=headers())
    assert_problem(missing, 401)
    assert present.status_code == 200


def test_a_required_token_must_be_configured() -> None:
    with pytest.raises(ValueError, match="service token is required"):
        HttpSettings(require_token=True)
    with pytest.raises(ValueError, match="must not be empty"):
        HttpSettings(service_token="")
    with pytest.raises(ValueError, match="must be a list"):
        HttpSettings(service_tokens={"t": "acme"})


def test_token_table_matches_whole_tokens_only() -> None:
    table = TokenTable({"abc": ["t1"], "xyz": ["*"]})
    assert table.tenants_of("abc") == frozenset({"t1"})
    assert table.tenants_of("xyz") == frozenset({"*"})
    assert table.tenants_of("ab") is None
    assert table.tenants_of("abcd") is None
    assert table.tenants_of("ábc") is None
    assert bearer_token("Bearer  abc ") == "abc"
    assert bearer_token("Token abc") is None
    assert bearer_token(None) is None


# --- headers ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "body"), V1_ROUTES)
@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("X-Tenant-Id", None),
        ("X-User-Id", None),
        ("X-Tenant-Id", "has space"),
        ("X-Tenant-Id", "a:b"),
        ("X-Tenant-Id", "t" * 129),
        ("X-Tenant-Id", ""),
        # any printable user id is taken (issue 29, item 3: "u*1", "u/1", "." and ".." are,
        # stored hashed; a path names "/", "." and ".." users by that stored form)
        ("X-User-Id", "u\t1"),
        ("X-User-Id", "u" * 129),
        ("X-Tenant-Id", "."),
        ("X-Locale", "english!"),
        ("X-Locale", "e"),
        ("X-Locale", "en-" + "x" * 70),
    ],
)
async def test_invalid_headers_are_422(
    client: AsyncTestClient[Litestar],
    service: FakeThreadService,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    header: str,
    value: str | None,
) -> None:
    sent = headers(**{header.replace("-", "_"): value})
    response = await client.request(method, path, json=body, headers=sent)
    assert_invalid(response, header, "header")
    assert service.calls == []


@pytest.mark.parametrize(
    ("sent", "meant"),
    [("erin@exämple.com".encode(), "erin@exämple.com"), ("ü".encode("latin-1"), "ü")],
)
async def test_a_non_ascii_user_header_is_read_as_utf8_or_else_latin1(
    client: AsyncTestClient[Litestar], service: FakeThreadService, sent: bytes, meant: str
) -> None:
    """Issue 29, item 3: such ids were 422; the caller now carries their stored form."""
    raw = {k.encode(): v.encode() for k, v in headers().items()}
    raw[b"X-User-Id"] = sent
    stored = stored_user_id(meant)
    response = await client.get(f"/v1/users/{stored}/memory", headers=raw)
    assert response.status_code == 200, response.text
    assert service.calls == [("memory", Caller("acme", stored, None))]


@pytest.mark.parametrize("locale", ["en", "fa-IR", "zh-Hans-CN", "zh_CN", "fil"])
async def test_the_caller_carries_tenant_user_and_locale(
    client: AsyncTestClient[Litestar], service: FakeThreadService, locale: str
) -> None:
    response = await client.get("/v1/users/u1/memory", headers=headers(X_Locale=locale))
    assert response.status_code == 200
    assert service.calls == [("memory", Caller("acme", "u1", locale))]


async def test_the_locale_is_optional(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    await client.get("/v1/users/u1/memory", headers=headers())
    assert service.calls == [("memory", Caller("acme", "u1", None))]


# --- path parameters --------------------------------------------------------------------------

THREAD_ROUTES = [r for r in V1_ROUTES if "/threads/" in r[1]]


@pytest.mark.parametrize(("method", "path", "body"), THREAD_ROUTES)
@pytest.mark.parametrize("bad", ["has%20space", "t" * 129, "t1%0A", "%C3%BC", "a%2Fb"])
async def test_invalid_thread_ids_are_422(
    client: AsyncTestClient[Litestar],
    service: FakeThreadService,
    method: str,
    path: str,
    body: dict[str, Any] | None,
    bad: str,
) -> None:
    response = await client.request(
        method, path.replace("/t1", "/" + bad, 1), json=body, headers=headers()
    )
    if bad == "a%2Fb":  # an encoded slash splits the path: no such route
        assert response.status_code in (404, 422)
        return
    assert_invalid(response, "thread_id", "path")
    assert service.calls == []


ID_SCHEMA_PATTERN = (
    r"^(?:[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}|\.[A-Za-z0-9_-][A-Za-z0-9._-]{0,126}"
    r"|\.\.[A-Za-z0-9._-]{1,126})$"
)
"""1..128 of ``[A-Za-z0-9._-]``, but not ``.`` or ``..`` (spelled out: the document's)."""
THREAD_SCHEMA_PATTERN = (
    r"^(?:[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,127}|\.[A-Za-z0-9_:-][A-Za-z0-9._:-]{0,126}"
    r"|\.\.[A-Za-z0-9._:-]{1,126})$"
)


@pytest.mark.parametrize("pattern", [ID_PATTERN, THREAD_ID_PATTERN])
def test_a_dot_segment_is_not_an_id_but_dots_within_one_are(pattern: str) -> None:
    """``.`` and ``..`` in a path are removed by every client before the request is sent;
    the contract's patterns (and so OpenAPI) refuse them, and keep every other id."""
    assert not exact(pattern, ".")
    assert not exact(pattern, "..")
    for fine in ("...", ".a", "..a", "a.", "a..b", "_", "-.", "v1.2"):
        assert exact(pattern, fine), fine
    assert re.fullmatch(pattern.removeprefix("^").removesuffix("$"), "t" * 128)
    assert not exact(pattern, "t" * 129)


async def test_thread_ids_may_hold_colons_dots_and_dashes(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    response = await client.delete("/v1/threads/ticket:42.v-1_a", headers=headers())
    assert response.status_code == 204
    assert service.calls == [("delete_thread", (CALLER, "ticket:42.v-1_a"))]


@pytest.mark.parametrize(
    "bad", ["not-a-uuid", "6f1c1a5254a44f5e9a432f7d1f0e2a11", RUN_ID + "%0A", "1"]
)
async def test_a_run_id_path_must_be_a_uuid(
    client: AsyncTestClient[Litestar], service: FakeThreadService, bad: str
) -> None:
    response = await client.post(
        f"/v1/threads/t1/runs/{bad}/feedback", json={"score": 1}, headers=headers()
    )
    assert_invalid(response, "run_id", "path")
    assert service.calls == []


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v1/users/u2/memory"), ("DELETE", "/v1/users/u2/memory"), ("DELETE", "/v1/users/u2")],
)
async def test_a_user_path_other_than_the_caller_is_403(
    client: AsyncTestClient[Litestar], service: FakeThreadService, method: str, path: str
) -> None:
    response = await client.request(method, path, headers=headers())
    body = assert_problem(response, 403, "about:blank")
    assert "X-User-Id" in body["detail"]
    assert service.calls == []


@pytest.mark.parametrize("other", ["has%20space", "a:b", "u1%40x", "~" + "0" * 64])
async def test_another_users_path_is_403(
    client: AsyncTestClient[Litestar], service: FakeThreadService, other: str
) -> None:
    response = await client.get(f"/v1/users/{other}/memory", headers=headers())
    assert_problem(response, 403, "about:blank")
    assert service.calls == []


@pytest.mark.parametrize("bad", ["u" * 129, "u1%0A", "%7F"])
async def test_an_invalid_user_path_is_422(
    client: AsyncTestClient[Litestar], service: FakeThreadService, bad: str
) -> None:
    response = await client.get(f"/v1/users/{bad}/memory", headers=headers())
    assert_invalid(response, "user_id", "path")
    assert service.calls == []


# --- errors in general ------------------------------------------------------------------------


async def test_unknown_routes_are_404_problems(client: AsyncTestClient[Litestar]) -> None:
    assert_problem(await client.get("/v1/nothing", headers=headers()), 404, "about:blank")
    assert_problem(await client.get("/nothing"), 404)


async def test_wrong_methods_are_405_problems(client: AsyncTestClient[Litestar]) -> None:
    response = await client.get("/v1/threads/t1/runs", headers=headers())
    assert_problem(response, 405, "about:blank")
    response = await client.put("/v1/users/u1", headers=headers())
    assert_problem(response, 405)


async def test_an_unexpected_error_is_a_500_that_names_nothing_internal(
    client: AsyncTestClient[Litestar], service: FakeThreadService, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(caller: Caller) -> None:
        raise RuntimeError("postgresql://admin:hunter2@db")

    monkeypatch.setattr(service, "memory", broken)
    response = await client.get("/v1/users/u1/memory", headers=headers())
    body = assert_problem(response, 500, "about:blank")
    assert "hunter2" not in response.text
    assert body["detail"] == "An unexpected error occurred."


async def test_debug_mode_names_the_unexpected_error(
    service: FakeThreadService, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(caller: Caller) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr(service, "memory", broken)
    async with AsyncTestClient(create_http_app(service, settings(debug=True))) as client:
        response = await client.get("/v1/users/u1/memory", headers=headers())
    assert assert_problem(response, 500)["detail"] == "RuntimeError: boom"


async def test_an_unavailable_backend_is_503(
    client: AsyncTestClient[Litestar], service: FakeThreadService, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def down(caller: Caller, thread_id: str) -> None:
        raise Unavailable("connection refused to postgresql://secret")

    monkeypatch.setattr(service, "delete_thread", down)
    response = await client.delete("/v1/threads/t1", headers=headers())
    assert_problem(response, 503, "unavailable")
    assert "secret" not in response.text


# --- POST /v1/threads/{thread_id}/runs: the body ----------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [b"", b"not json", b"{", b'{"message": {"content": "hi"}', b"\xff\xfe"],
)
async def test_a_body_that_is_not_json_is_400(
    client: AsyncTestClient[Litestar], service: FakeThreadService, raw: bytes
) -> None:
    response = await client.post(
        "/v1/threads/t1/runs", content=raw, headers=headers() | {"Content-Type": "application/json"}
    )
    assert_problem(response, 400, "about:blank")
    assert service.calls == []


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ([], None),
        ("text", None),
        ({}, "message"),
        ({"message": "hi"}, "message"),
        ({"message": {}}, "message"),
        ({"message": {"content": 5}}, "message"),
        ({"message": {"content": ""}}, "message"),
        ({"message": {"content": "  \n\t "}}, "message"),
        ({"message": {"content": "\x1f\x85\u3000"}}, "message"),  # whitespace to Python
        ({"message": {"content": "hi", "role": "ai"}}, "message"),
        ({"message": {"content": "hi"}, "stream": True}, None),
        ({"message": {"content": "hi", "id": ""}}, "message"),
        ({"message": {"content": "hi", "id": "has space"}}, "message"),
        ({"message": {"content": "hi", "id": "m1\n"}}, "message"),
        ({"message": {"content": "hi", "id": 7}}, "message"),
        ({"message": {"content": "hi"}, "run_id": "not-a-uuid"}, "run_id"),
        ({"message": {"content": "hi"}, "run_id": RUN_ID + "\n"}, None),
        ({"message": {"content": "hi"}, "run_id": 12}, "run_id"),
    ],
)
async def test_invalid_run_bodies_are_422(
    client: AsyncTestClient[Litestar], service: FakeThreadService, body: Any, key: str | None
) -> None:
    response = await client.post("/v1/threads/t1/runs", json=body, headers=headers())
    problem = assert_problem(response, 422, "invalid-request")
    assert problem["errors"], problem
    assert all(e.get("source") == "body" for e in problem["errors"] if "source" in e)
    if key is not None:
        assert any(str(e.get("key", "")).startswith(key) for e in problem["errors"]), problem
    assert service.calls == []


async def test_a_message_over_32_kib_of_utf8_is_413_before_the_service(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    content = "é" * (MAX_MESSAGE_BYTES // 2) + "x"  # 32 KiB + 1 byte, 16,385 characters
    response = await run(client, content)
    assert_problem(response, 413, "message-too-large")
    assert service.calls == []


async def test_a_message_of_exactly_32_kib_is_accepted(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    response = await run(client, "é" * (MAX_MESSAGE_BYTES // 2), accept=JSON)
    assert response.status_code == 200


async def test_the_service_may_refuse_a_message_over_the_token_budget(
    client: AsyncTestClient[Litestar], service: FakeThreadService, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def over_budget(*args: Any) -> None:
        raise MessageTooLarge(9000, 8000)

    monkeypatch.setattr(service, "start_run", over_budget)
    body = assert_problem(await run(client), 413, "message-too-large")
    assert "8000" in body["detail"]


async def test_a_whole_body_over_the_limit_is_413(service: FakeThreadService) -> None:
    app = create_http_app(service, settings(max_body_bytes=1000))
    async with AsyncTestClient(app) as client:
        response = await run(client, "x" * 2000)
    assert_problem(response, 413)
    assert service.calls == []


# --- runs: SSE ----------------------------------------------------------------------------------


async def test_a_run_streams_metadata_custom_messages_then_end(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    async with aconnect_sse(
        client,
        "POST",
        "/v1/threads/t1/runs",
        json={"message": {"content": "where is my parcel", "id": "m1"}, "run_id": RUN_ID},
        headers=headers(),
    ) as source:
        assert source.response.status_code == 200
        assert source.response.headers["content-type"].startswith(SSE)
        assert source.response.headers["cache-control"] == "no-cache"
        assert source.response.headers["x-accel-buffering"] == "no"
        events = [(sse.event, sse.json()) async for sse in source.aiter_sse()]

    names = [name for name, _ in events]
    assert names == ["metadata", "custom", *["messages"] * DELTAS, "end"]
    assert events[0][1] == {"run_id": RUN_ID, "thread_id": "t1"}
    assert events[1][1] == RETRIEVAL
    answer = answer_to("where is my parcel")
    assert "".join(data["delta"] for name, data in events if name == "messages") == answer
    assert {data["id"] for name, data in events if name == "messages"} == {f"ai-{RUN_ID}"}
    end = events[-1][1]
    assert end == {
        "run_id": RUN_ID,
        "thread_id": "t1",
        "status": "answered",
        "message": {
            "id": f"ai-{RUN_ID}",
            "role": "ai",
            "content": answer,
            "citations": [
                {"chunk_id": CITATION.chunk_id, "doc_id": CITATION.doc_id, "title": CITATION.title}
            ],
        },
        "usage": {"input_tokens": 4, "output_tokens": 4, "source": "counted"},
    }
    thread = service.thread(CALLER, "t1")
    assert thread is not None
    assert [m.id for m in thread.messages] == ["m1", f"ai-{RUN_ID}"]
    assert service.busy == {}


async def test_the_service_gets_the_caller_thread_and_request(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    await run(client, "hi", accept=JSON, run_id=RUN_ID.upper())
    [(caller, thread_id, request)] = started_runs(service)
    assert caller == CALLER
    assert thread_id == "t1"
    assert request.message.content == "hi"
    assert request.message.id is None
    assert request.run_id == RUN_ID  # canonical, lower case


async def test_a_failing_run_ends_its_stream_with_an_error_problem(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    service.fail = True
    response = await run(client)
    assert response.status_code == 200
    events = parse_sse(response.text)
    assert [name for name, _ in events] == ["metadata", "custom", "messages", "error"]
    problem = events[-1][1]
    assert problem["status"] == 500
    assert problem["type"] == "urn:threadkeeper:problem:run-failed"
    thread = service.thread(CALLER, "t1")
    assert thread is None or thread.messages == []
    assert service.busy == {}


async def test_a_delta_with_a_line_separator_reaches_a_client_reading_lines_whole(
    client: AsyncTestClient[Litestar],
) -> None:
    # httpx's aiter_lines splits where str.splitlines does (U+2028, U+2029, NEL among them):
    # unescaped in a `data:` line, such a character cut the event's JSON in two for a client
    # that reads the stream by lines (tests/support/load.py does)
    content = "one\u2028two\u2029three\x85four"
    events: list[tuple[str, Any]] = []
    async with client.stream(
        "POST",
        "/v1/threads/t1/runs",
        json={"message": {"content": content}},
        headers={**headers(), "Accept": SSE},
    ) as response:
        name, data = "message", []
        async for line in response.aiter_lines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif not line and data:
                events.append((name, json.loads("\n".join(data))))
                data = []
    assert [name for name, _ in events][-1] == "end"
    deltas = "".join(data["delta"] for name, data in events if name == "messages")
    assert deltas == answer_to(content) == events[-1][1]["message"]["content"]


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, SSE),
        ("*/*", SSE),
        ("text/event-stream", SSE),
        ("application/json", JSON),
        ("application/json, text/event-stream;q=0.5", JSON),
        ("text/event-stream, application/json;q=0.9", SSE),
        ("application/json, */*;q=0.1", JSON),
        ("application/json;q=0, */*", SSE),
        ("application/*", JSON),
        ("text/*", SSE),
        ("APPLICATION/JSON; charset=utf-8", JSON),
        ("text/html", None),
        ("text/html, application/xml;q=0.9", None),
        ("text/event-stream;q=0, application/json;q=0", None),
    ],
)
async def test_accept_picks_sse_or_json(
    client: AsyncTestClient[Litestar],
    service: FakeThreadService,
    accept: str | None,
    expected: str | None,
) -> None:
    request_headers = headers()
    if accept is not None:
        request_headers["Accept"] = accept
    response = await client.post(
        "/v1/threads/t1/runs", json={"message": {"content": "hi"}}, headers=request_headers
    )
    if expected is None:
        assert_problem(response, 406, "about:blank")
        assert service.calls == []
        return
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(expected)
    if expected == JSON:
        assert response.json()["status"] == "answered"
    else:
        assert parse_sse(response.text)[-1][0] == "end"


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        ("", SSE),
        ("application/json, text/event-stream", JSON),
        ("text/event-stream, application/json", SSE),
        ("application/json;q=abc, text/event-stream;q=0.1", SSE),
        ("application/json;q=nan", None),
        ("garbage", None),
        ("*/*;q=0.2, application/json;q=0.1", SSE),
    ],
)
def test_choose_representation(accept: str, expected: str | None) -> None:
    assert choose_representation(accept) == expected


# --- runs: JSON, conflicts, retries ------------------------------------------------------------


async def test_json_mode_returns_the_final_body(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    response = await run(client, "hi", accept=JSON, run_id=RUN_ID)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(JSON)
    body = response.json()
    assert body["run_id"] == RUN_ID
    assert body["thread_id"] == "t1"
    assert body["message"]["role"] == "ai"
    assert body["message"]["content"] == answer_to("hi")
    assert set(body["usage"]) == {"input_tokens", "output_tokens", "source"}
    thread = service.thread(CALLER, "t1")
    assert thread is not None
    assert len(thread.messages) == 2


async def test_a_failed_json_run_is_a_500_problem_and_stores_nothing(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    service.fail = True
    response = await run(client, accept=JSON)
    body = assert_problem(response, 500, "run-failed")
    assert body["detail"] == "The run did not complete; the thread is unchanged."
    thread = service.thread(CALLER, "t1")
    assert thread is None or thread.messages == []
    assert service.busy == {}


@pytest.mark.parametrize("accept", [JSON, SSE])
async def test_a_busy_thread_is_409_naming_the_running_run(
    client: AsyncTestClient[Litestar], service: FakeThreadService, accept: str
) -> None:
    running = str(uuid.uuid4())
    service.busy[service.key(CALLER, "t1")] = running
    response = await run(client, accept=accept)
    body = assert_problem(response, 409, "thread-busy")
    assert body["running_run_id"] == running


async def test_a_message_id_already_in_the_thread_is_409(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    service.seed_thread(CALLER, "t1", turns=1)
    response = await client.post(
        "/v1/threads/t1/runs",
        json={"message": {"content": "again", "id": "h1"}},
        headers=headers(Accept=JSON),
    )
    body = assert_problem(response, 409, "duplicate-message")
    assert body["message_id"] == "h1"


async def test_a_completed_run_id_returns_its_stored_body_without_a_new_run(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    first = await run(client, "hi", accept=JSON, run_id=RUN_ID)
    again = await run(client, "hi", accept=JSON, run_id=RUN_ID)
    assert again.status_code == 200
    assert again.json() == first.json()
    streamed = parse_sse((await run(client, "hi", accept=SSE, run_id=RUN_ID)).text)
    assert [name for name, _ in streamed] == ["metadata", "end"]
    assert streamed[-1][1] == first.json()
    thread = service.thread(CALLER, "t1")
    assert thread is not None
    assert len(thread.messages) == 2


async def test_runs_are_scoped_by_tenant_and_user(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    await run(client, "mine", accept=JSON)
    other = await client.get("/v1/threads/t1/messages", headers=headers(X_User_Id="u2"))
    assert_problem(other, 404, "unknown-thread")
    other_tenant = await client.get(
        "/v1/threads/t1/messages", headers=headers(X_Tenant_Id="globex")
    )
    assert_problem(other_tenant, 404)


# --- runs: the client leaves -------------------------------------------------------------------


def asgi_scope(path: str, body: bytes) -> dict[str, Any]:
    raw_headers = [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]
    raw_headers += [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": raw_headers,
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
        "state": {},
    }


@pytest.mark.parametrize(
    "where", ["waiting-for-the-service", "waiting-to-send", "before-the-first-byte"]
)
async def test_a_client_disconnect_closes_the_services_event_iterator(
    app: Litestar, service: FakeThreadService, where: str
) -> None:
    """At ASGI level, as a server reports it: the client leaves after the first event while
    the relay waits for the service's next event, or while a send is stuck on the socket, or
    before the stream has sent anything."""
    service.delay = 0.05 if where == "waiting-for-the-service" else 0.0
    body = json.dumps({"message": {"content": "hello"}, "run_id": RUN_ID}).encode()
    first_chunk = anyio.Event()
    if where == "before-the-first-byte":
        first_chunk.set()
    request_read = False
    chunks: list[bytes] = []

    async def receive() -> dict[str, Any]:
        nonlocal request_read
        if not request_read:
            request_read = True
            return {"type": "http.request", "body": body, "more_body": False}
        await first_chunk.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            chunks.append(message["body"])
            if first_chunk.is_set():
                await anyio.sleep_forever()  # the socket is stuck; only cancellation ends this
            first_chunk.set()

    async with AsyncTestClient(app):  # lifespan
        with anyio.fail_after(5):
            await app(asgi_scope("/v1/threads/t1/runs", body), receive, send)  # type: ignore[arg-type]

    assert where == "before-the-first-byte" or b"event: metadata" in chunks[0]
    assert service.iterators_opened == [RUN_ID]
    assert service.iterators_closed == [RUN_ID]
    assert b"event: end" not in b"".join(chunks)
    thread = service.thread(CALLER, "t1")
    assert thread is None or thread.messages == []  # the run left the thread as it was
    assert service.busy == {}


async def wait_until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    for _ in range(int(seconds / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("not reached in time")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


async def test_a_real_socket_disconnect_closes_the_services_event_iterator(
    app: Litestar, service: FakeThreadService
) -> None:
    """The same over uvicorn and TCP: the client reads the first event and hangs up."""
    service.delay = 0.1
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    try:
        await wait_until(lambda: server.started)
        async with (
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http,
            aconnect_sse(
                http,
                "POST",
                "/v1/threads/t1/runs",
                json={"message": {"content": "hi"}, "run_id": RUN_ID},
                headers=HEADERS,
            ) as source,
        ):
            first = await anext(source.aiter_sse())
            assert first.event == "metadata"
        await wait_until(lambda: service.iterators_closed == [RUN_ID])
        assert service.busy == {}
        thread = service.thread(CALLER, "t1")
        assert thread is None or thread.messages == []
    finally:
        server.should_exit = True
        await task


async def test_the_relay_stops_at_end_and_closes_the_iterator() -> None:
    closed = []

    async def batches() -> AsyncIterator[list[RunEvent]]:
        try:
            yield [RunEvent("metadata", {"run_id": "r", "thread_id": "t"})]
            yield [RunEvent("end", {"run_id": "r"})]
            yield [RunEvent("messages", {"id": "late", "delta": "never relayed"})]
        finally:
            closed.append(True)

    relay = EventRelay(batches())
    sent = [chunk async for chunk in relay.stream()]
    assert [name for name, _ in parse_sse(b"".join(sent).decode())] == ["metadata", "end"]
    assert closed == [True]
    await relay.close()  # after the response: idempotent
    assert closed == [True]


async def test_the_relay_writes_each_batch_as_one_chunk_and_stops_inside_one_at_end() -> None:
    deltas = [RunEvent("messages", {"id": "a1", "delta": f"w{i} "}) for i in range(5)]

    async def batches() -> AsyncIterator[list[RunEvent]]:
        yield [RunEvent("metadata", {"run_id": "r", "thread_id": "t"}), *deltas[:2]]
        yield deltas[2:]
        yield [
            RunEvent("end", {"run_id": "r"}),
            RunEvent("messages", {"id": "late", "delta": "never relayed"}),
        ]

    sent = [chunk async for chunk in (await EventRelay.start(batches())).stream()]
    assert len(sent) == 3
    assert [len(parse_sse(chunk.decode())) for chunk in sent] == [3, 3, 1]
    events = parse_sse(b"".join(sent).decode())
    assert [name for name, _ in events] == ["metadata", *["messages"] * 5, "end"]
    assert "".join(data["delta"] for name, data in events if name == "messages") == (
        "w0 w1 w2 w3 w4 "
    )


def test_an_event_is_one_data_line_whatever_its_text_holds() -> None:
    text = "line one\nline two\r\nthree\rfour \u2028 five \u2029 six \x85 seven \x0c\x1e eight"
    chunk = encode_event("messages", {"id": "a1", "delta": text})
    assert chunk.endswith(b"\r\n\r\n")
    lines = chunk.decode().split("\r\n")
    assert lines[0] == "event: messages"
    assert lines[1].startswith("data: ")
    assert lines[2:] == ["", ""]
    assert parse_sse(chunk.decode()) == [("messages", {"id": "a1", "delta": text})]


async def test_an_error_before_the_first_event_is_a_plain_problem_and_closes_the_iterator(
    client: AsyncTestClient[Litestar], service: FakeThreadService, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[bool] = []

    class BusyOnFirstEvent:
        run_id = RUN_ID

        async def events(self) -> AsyncIterator[RunEvent]:
            raise AssertionError("the relay reads batches")
            yield

        async def batches(self) -> AsyncIterator[list[RunEvent]]:
            try:
                raise ThreadBusy("other-run")
                yield  # an async generator
            finally:
                closed.append(True)

        async def result(self) -> dict[str, Any]:
            raise AssertionError("SSE mode")

    async def start_run(*args: Any) -> BusyOnFirstEvent:
        return BusyOnFirstEvent()

    monkeypatch.setattr(service, "start_run", start_run)
    response = await run(client, accept=SSE)
    assert assert_problem(response, 409, "thread-busy")["running_run_id"] == "other-run"
    assert closed == [True]


async def test_starting_the_relay_takes_the_first_event() -> None:
    steps: list[str] = []

    async def batches() -> AsyncIterator[list[RunEvent]]:
        try:
            steps.append("started")
            yield [RunEvent("metadata", {"run_id": "r", "thread_id": "t"})]
            steps.append("resumed")
            yield [RunEvent("end", {"run_id": "r"})]
        finally:
            steps.append("closed")

    relay = await EventRelay.start(batches())
    assert steps == ["started"]
    await relay.close()  # the client left before the first byte
    assert steps == ["started", "closed"]


async def test_an_empty_event_stream_is_relayed_as_empty() -> None:
    async def batches() -> AsyncIterator[list[RunEvent]]:
        return
        yield

    relay = await EventRelay.start(batches())
    assert [chunk async for chunk in relay.stream()] == []


async def test_a_quiet_run_gets_keep_alive_comments_and_its_events_after_them() -> None:
    release = asyncio.Event()

    async def batches() -> AsyncIterator[list[RunEvent]]:
        yield [RunEvent("metadata", {"run_id": "r", "thread_id": "t"})]
        await release.wait()
        yield [RunEvent("end", {"run_id": "r"})]

    sent: list[bytes] = []
    async for chunk in (await EventRelay.start(batches(), heartbeat=0.01)).stream():
        sent.append(chunk)
        if chunk == KEEP_ALIVE and sent.count(KEEP_ALIVE) == 2:
            release.set()
    assert sent[0].startswith(b"event: metadata\r\n")
    assert sent[1:3] == [b": keep-alive\r\n\r\n"] * 2
    assert [name for name, _ in parse_sse(b"".join(sent).decode())] == ["metadata", "end"]


@pytest.mark.parametrize(
    ("error", "status", "type_"),
    [
        (RuntimeError("internal detail"), 500, "about:blank"),
        (Unavailable("db down"), 503, "urn:threadkeeper:problem:unavailable"),
    ],
)
async def test_a_service_error_mid_stream_becomes_an_error_event(
    error: Exception, status: int, type_: str
) -> None:
    async def batches() -> AsyncIterator[list[RunEvent]]:
        yield [RunEvent("metadata", {"run_id": "r", "thread_id": "t"})]
        raise error

    sent = b"".join([chunk async for chunk in EventRelay(batches()).stream()]).decode()
    events = parse_sse(sent)
    assert [name for name, _ in events] == ["metadata", "error"]
    problem = events[-1][1]
    assert problem["status"] == status
    assert problem["type"] == type_
    assert "internal detail" not in sent


# --- GET /v1/threads/{thread_id}/messages -------------------------------------------------------


async def test_messages_pages_backwards_with_next_before(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    service.seed_thread(CALLER, "t1", turns=5)  # h1 a1 … h5 a5
    first = await client.get("/v1/threads/t1/messages", params={"limit": 4}, headers=headers())
    assert first.status_code == 200
    page = first.json()
    assert [m["id"] for m in page["messages"]] == ["h4", "a4", "h5", "a5"]
    assert page["next_before"] == "h4"
    human, ai = page["messages"][0], page["messages"][1]
    assert human == {
        "id": "h4",
        "role": "human",
        "content": "question 4",
        "citations": [],
        "created_at": "2026-01-01T00:00:00Z",
    }
    assert ai["role"] == "ai"
    assert ai["citations"] == [
        {"chunk_id": "chunk-1", "doc_id": "doc-1", "title": "Returns policy"}
    ]

    second = await client.get(
        "/v1/threads/t1/messages", params={"limit": 4, "before": "h4"}, headers=headers()
    )
    assert [m["id"] for m in second.json()["messages"]] == ["h2", "a2", "h3", "a3"]
    assert second.json()["next_before"] == "h2"
    last = await client.get("/v1/threads/t1/messages", params={"before": "h2"}, headers=headers())
    assert last.json() == {
        "messages": [last.json()["messages"][0], last.json()["messages"][1]],
        "next_before": None,
    }
    assert [m["id"] for m in last.json()["messages"]] == ["h1", "a1"]


async def test_messages_default_to_20_and_allow_1_to_100(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    service.seed_thread(CALLER, "t1", turns=60)
    default = await client.get("/v1/threads/t1/messages", headers=headers())
    assert len(default.json()["messages"]) == 20
    one = await client.get("/v1/threads/t1/messages?limit=1", headers=headers())
    assert len(one.json()["messages"]) == 1
    hundred = await client.get("/v1/threads/t1/messages?limit=100", headers=headers())
    assert len(hundred.json()["messages"]) == 100
    assert [c[1][2:] for c in service.calls] == [(20, None), (1, None), (100, None)]


# --- GET /v1/threads/{thread_id}/storage --------------------------------------------------------


async def test_storage_answers_the_bytes_by_kind_and_their_total(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    service.seed_thread(CALLER, "t1", turns=2)  # question 1, answer 1, …: 36 bytes; 2 runs
    response = await client.get("/v1/threads/t1/storage", headers=headers())
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(JSON)
    kept = {
        "checkpoints": 36,
        "messages": 0,
        "run_records": 128,
        "archive": 0,
        "audit": 0,
        "feedback": 0,
    }
    assert response.json() == {  # nothing compressed: the logical figures are the stored ones
        "thread_id": "t1",
        "bytes": kept,
        "total": 164,
        "logical_bytes": kept,
        "logical_total": 164,
    }
    assert service.calls == [("storage", (CALLER, "t1"))]


async def test_storage_of_an_unknown_or_someone_elses_thread_is_the_same_404(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    service.seed_thread(Caller("acme", "u2"), "theirs", turns=1)
    unknown = await client.get("/v1/threads/nothing/storage", headers=headers())
    theirs = await client.get("/v1/threads/theirs/storage", headers=headers())
    messages = await client.get("/v1/threads/theirs/messages", headers=headers())
    for response in (unknown, theirs, messages):
        assert_problem(response, 404, "unknown-thread")
    assert theirs.json() == unknown.json() == messages.json()


async def test_storage_refuses_an_invalid_thread_id(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    response = await client.get("/v1/threads/has%20space/storage", headers=headers())
    assert_invalid(response, "thread_id", "path")
    assert service.calls == []


def test_openapi_describes_the_storage_route(openapi: dict[str, Any]) -> None:
    operation = openapi["paths"]["/v1/threads/{thread_id}/storage"]["get"]
    assert {"200", "404"} <= set(operation["responses"])
    ok = operation["responses"]["200"]["content"][JSON]["schema"]
    assert ok == {"$ref": "#/components/schemas/ThreadStorageOut"}
    schemas = openapi["components"]["schemas"]
    assert set(schemas["ThreadStorageOut"]["properties"]) == {
        "thread_id",
        "bytes",
        "total",
        "logical_bytes",
        "logical_total",
    }
    assert set(schemas["StorageBytesOut"]["required"]) == {
        "checkpoints",
        "messages",
        "run_records",
        "archive",
        "audit",
        "feedback",
    }


@pytest.mark.parametrize(
    ("query", "key"),
    [
        ("limit=0", "limit"),
        ("limit=101", "limit"),
        ("limit=-1", "limit"),
        ("limit=abc", "limit"),
        ("limit=1.5", "limit"),
        ("before=has%20space", "before"),
        ("before=" + "m" * 129, "before"),
        ("before=h1%0A", "before"),
    ],
)
async def test_invalid_query_parameters_are_422(
    client: AsyncTestClient[Litestar], service: FakeThreadService, query: str, key: str
) -> None:
    service.seed_thread(CALLER, "t1", turns=1)
    response = await client.get(f"/v1/threads/t1/messages?{query}", headers=headers())
    assert_invalid(response, key, "query")
    assert service.calls == []


async def test_an_unknown_thread_or_cursor_is_404(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    unknown = await client.get("/v1/threads/nope/messages", headers=headers())
    body = assert_problem(unknown, 404, "unknown-thread")
    assert "acme" not in body["detail"]  # never the storage key
    service.seed_thread(CALLER, "t1", turns=1)
    cursor = await client.get("/v1/threads/t1/messages?before=zzz", headers=headers())
    assert_problem(cursor, 404, "unknown-message")


# --- DELETE /v1/threads/{thread_id} -------------------------------------------------------------


async def test_deleting_a_thread_is_204_also_when_already_gone(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    service.seed_thread(CALLER, "t1", turns=2)
    first = await client.delete("/v1/threads/t1", headers=headers())
    assert first.status_code == 204
    assert first.content == b""
    assert service.thread(CALLER, "t1") is None
    again = await client.delete("/v1/threads/t1", headers=headers())
    assert again.status_code == 204


# --- POST /v1/threads/{thread_id}/runs/{run_id}/feedback ---------------------------------------


async def test_feedback_on_a_completed_run_is_204(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    await run(client, accept=JSON, run_id=RUN_ID)
    url = f"/v1/threads/t1/runs/{RUN_ID.upper()}/feedback"
    up = await client.post(url, json={"score": 1, "comment": "great"}, headers=headers())
    assert up.status_code == 204
    assert up.content == b""
    down = await client.post(url, json={"score": -1}, headers=headers())
    assert down.status_code == 204
    thread = service.thread(CALLER, "t1")
    assert thread is not None
    assert thread.feedback == {RUN_ID: (-1, None)}


async def test_feedback_on_an_unknown_run_is_404(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    response = await client.post(
        f"/v1/threads/t1/runs/{RUN_ID}/feedback", json={"score": 1}, headers=headers()
    )
    assert_problem(response, 404, "unknown-run")


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ({}, "score"),
        ({"score": 0}, "score"),
        ({"score": 2}, "score"),
        ({"score": "1"}, "score"),
        ({"score": True}, "score"),
        ({"score": 1.0}, "score"),
        ({"score": 1, "comment": "x" * 2001}, "comment"),
        ({"score": 1, "comment": 5}, "comment"),
        ({"score": 1, "rating": 5}, None),
        ([1], None),
    ],
)
async def test_invalid_feedback_is_422(
    client: AsyncTestClient[Litestar], service: FakeThreadService, body: Any, key: str | None
) -> None:
    response = await client.post(
        f"/v1/threads/t1/runs/{RUN_ID}/feedback", json=body, headers=headers()
    )
    problem = assert_problem(response, 422, "invalid-request")
    if key is not None:
        assert any(e.get("key") == key and e.get("source") == "body" for e in problem["errors"]), (
            problem
        )
    assert service.calls == []


async def test_a_comment_of_2000_characters_is_accepted(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    await run(client, accept=JSON, run_id=RUN_ID)
    response = await client.post(
        f"/v1/threads/t1/runs/{RUN_ID}/feedback",
        json={"score": 1, "comment": "ü" * 2000},
        headers=headers(),
    )
    assert response.status_code == 204


async def test_feedback_that_is_not_json_is_400(client: AsyncTestClient[Litestar]) -> None:
    response = await client.post(
        f"/v1/threads/t1/runs/{RUN_ID}/feedback",
        content=b"score=1",
        headers=headers() | {"Content-Type": "application/json"},
    )
    assert_problem(response, 400)


# --- /v1/users/{user_id} --------------------------------------------------------------------------


async def test_memory_lists_profile_and_facts_with_provenance(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    service.seed_memory(CALLER, profile=1, facts=2)
    response = await client.get("/v1/users/u1/memory", headers=headers())
    assert response.status_code == 200
    body = response.json()
    source = {"thread_id": "t1", "message_id": "h1", "at": "2026-01-01T00:00:00Z"}
    assert body == {
        "profile": [{"key": "p0", "value": "profile 0", "source": source}],
        "facts": [
            {"key": "f0", "value": "fact 0", "source": source},
            {"key": "f1", "value": "fact 1", "source": source},
        ],
        "pending": False,
    }


async def test_memory_of_a_user_without_any_is_empty(client: AsyncTestClient[Litestar]) -> None:
    response = await client.get("/v1/users/u1/memory", headers=headers())
    assert response.json() == {"profile": [], "facts": [], "pending": False}


async def test_resetting_memory_answers_the_count_deleted(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    service.seed_memory(CALLER, profile=2, facts=3)
    response = await client.delete("/v1/users/u1/memory", headers=headers())
    assert response.status_code == 200
    assert response.json() == {"memory_items": 5}
    assert (await client.get("/v1/users/u1/memory", headers=headers())).json() == {
        "profile": [],
        "facts": [],
        "pending": False,
    }
    again = await client.delete("/v1/users/u1/memory", headers=headers())
    assert again.json() == {"memory_items": 0}


async def test_erasing_a_user_answers_a_receipt(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    service.seed_thread(CALLER, "t1", turns=2)
    service.seed_thread(CALLER, "t2", turns=1)
    service.seed_thread(Caller("acme", "u2"), "t1", turns=1)
    service.seed_memory(CALLER, profile=1, facts=1)
    await client.post(
        f"/v1/threads/t1/runs/{uuid.UUID(int=1)}/feedback", json={"score": 1}, headers=headers()
    )
    response = await client.delete("/v1/users/u1", headers=headers())
    assert response.status_code == 200
    assert response.json() == {
        "threads": 2,
        "messages": 6,
        "memory_items": 2,
        "feedback": 1,
        "remaining": {"memory": 0},
    }
    assert service.thread(Caller("acme", "u2"), "t1") is not None
    again = await client.delete("/v1/users/u1", headers=headers())
    assert again.json() == {
        "threads": 0,
        "messages": 0,
        "memory_items": 0,
        "feedback": 0,
        "remaining": {"memory": 0},
    }


# --- ops ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", OPS_ROUTES)
def test_ops_routes_need_no_headers(sync_client: TestClient[Litestar], path: str) -> None:
    response = sync_client.get(path)
    assert response.status_code == 200, response.text


def test_liveness(sync_client: TestClient[Litestar]) -> None:
    assert sync_client.get("/health/live").json() == {"status": "ok"}


def test_readiness_lists_each_backend(sync_client: TestClient[Litestar]) -> None:
    response = sync_client.get("/health/ready")
    assert response.json() == {"status": "ok", "checks": {"checkpoints": "ok", "memory": "ok"}}


def test_readiness_is_503_when_a_backend_is_not_ok(
    sync_client: TestClient[Litestar], service: FakeThreadService
) -> None:
    service.readiness["memory"] = "connection refused"
    response = sync_client.get("/health/ready")
    body = assert_problem(response, 503, "not-ready")
    assert body["checks"] == {"checkpoints": "ok", "memory": "connection refused"}
    assert "memory" in body["detail"]


def test_readiness_is_503_when_the_check_itself_fails(
    sync_client: TestClient[Litestar], service: FakeThreadService, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken() -> dict[str, str]:
        raise OSError("no route to host")

    monkeypatch.setattr(service, "ready", broken)
    body = assert_problem(sync_client.get("/health/ready"), 503, "not-ready")
    assert "no route" not in json.dumps(body)


async def test_metrics_are_prometheus_text(client: AsyncTestClient[Litestar]) -> None:
    await client.get("/v1/users/u1/memory", headers=headers())
    response = await client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    # the ASGI instrumentation's HTTP metrics, on threadkeeper's MeterProvider, by route
    assert "http_server_duration_milliseconds_count" in response.text
    assert 'http_target="/v1/users/{user_id}/memory"' in response.text
    assert "/v1/users/u1/" not in response.text, "a path's ids never label a metric"


def test_lifespan_hooks_run_at_startup_and_shutdown(service: FakeThreadService) -> None:
    seen: list[str] = []

    async def opened(app: Litestar) -> None:
        seen.append("startup")

    def closed() -> None:
        seen.append("shutdown")

    app = create_http_app(service, settings(on_startup=[opened], on_shutdown=[closed]))
    with TestClient(app) as client:
        assert seen == ["startup"]
        client.get("/health/live")
    assert seen == ["startup", "shutdown"]


# --- OpenAPI ------------------------------------------------------------------------------------


@pytest.fixture
def openapi(sync_client: TestClient[Litestar]) -> dict[str, Any]:
    response = sync_client.get("/schema/openapi.json")
    assert response.status_code == 200
    doc: dict[str, Any] = response.json()
    return doc


def test_openapi_lists_every_route(openapi: dict[str, Any]) -> None:
    operations = {
        (method.upper(), path) for path, item in openapi["paths"].items() for method in item
    }
    assert operations >= {
        ("POST", "/v1/threads/{thread_id}/runs"),
        ("GET", "/v1/threads/{thread_id}/messages"),
        ("GET", "/v1/threads/{thread_id}/storage"),
        ("DELETE", "/v1/threads/{thread_id}"),
        ("POST", "/v1/threads/{thread_id}/runs/{run_id}/feedback"),
        ("GET", "/v1/users/{user_id}/memory"),
        ("DELETE", "/v1/users/{user_id}/memory"),
        ("DELETE", "/v1/users/{user_id}"),
        ("GET", "/health/live"),
        ("GET", "/health/ready"),
        ("GET", "/metrics"),
    }


def test_openapi_describes_headers_security_and_problems(openapi: dict[str, Any]) -> None:
    assert openapi["components"]["securitySchemes"]["serviceToken"] == {
        "type": "http",
        "scheme": "bearer",
        "description": "The service token (THREADKEEPER_SERVICE_TOKEN).",
    }
    for path, item in openapi["paths"].items():
        for method, operation in item.items():
            responses = operation["responses"]
            for status, response in responses.items():
                if status.startswith(("4", "5")):
                    assert set(response["content"]) == {PROBLEM}, (method, path, status)
            if not path.startswith("/v1/"):
                assert "security" not in operation
                continue
            assert operation["security"] == [{"serviceToken": []}]
            params = {p["name"]: p for p in operation["parameters"] if p["in"] == "header"}
            assert params["X-Tenant-Id"]["required"] is True
            assert params["X-User-Id"]["required"] is True
            assert params["X-Locale"]["required"] is False
            assert params["X-Tenant-Id"]["schema"]["pattern"] == ID_SCHEMA_PATTERN
            assert {"401", "403", "422", "500"} <= set(responses), (method, path)
            assert ("400" in responses) == ("requestBody" in operation), (method, path)


def test_openapi_describes_the_run(openapi: dict[str, Any]) -> None:
    operation = openapi["paths"]["/v1/threads/{thread_id}/runs"]["post"]
    assert set(operation["responses"]["200"]["content"]) == {SSE, JSON}
    assert {"406", "409", "413"} <= set(operation["responses"])
    schemas = openapi["components"]["schemas"]
    assert set(schemas["RunBody"]["properties"]) == {"message", "run_id"}
    assert set(schemas["RunResultOut"]["properties"]) == {
        "run_id",
        "thread_id",
        "status",
        "message",
        "usage",
        "handoff_context",
    }
    problem = schemas["Problem"]["properties"]
    assert {"type", "title", "status", "detail", "running_run_id", "errors"} <= set(problem)
    path_params = {p["name"]: p for p in operation["parameters"] if p["in"] == "path"}
    assert path_params["thread_id"]["schema"]["pattern"] == THREAD_SCHEMA_PATTERN


def test_openapi_describes_one_run_event_as_schemathesis_reads_it(openapi: dict[str, Any]) -> None:
    """OpenAPI 3.1 has no ``itemSchema``: a ``text/event-stream`` schema is one event
    (``event`` and ``data``, the data JSON text described by ``contentSchema``)."""
    assert openapi["openapi"].startswith("3.1")
    ok = openapi["paths"]["/v1/threads/{thread_id}/runs"]["post"]["responses"]["200"]
    event = ok["content"][SSE]["schema"]
    assert event["type"] == "object"
    assert event["required"] == ["event", "data"]
    assert event["properties"]["event"]["enum"] == [
        "metadata",
        "messages",
        "custom",
        "end",
        "error",
    ]
    branches = {
        branch["properties"]["event"]["const"]: branch["properties"]["data"]
        for branch in event["oneOf"]
    }
    assert set(branches) == set(event["properties"]["event"]["enum"])
    assert {data["contentMediaType"] for data in branches.values()} == {JSON}
    content = {name: data["contentSchema"] for name, data in branches.items()}
    assert content["metadata"]["required"] == ["run_id", "thread_id"]
    assert content["messages"]["required"] == ["id", "delta"]
    assert content["custom"]["required"] == ["stage"]
    assert "additionalProperties" not in content["custom"]  # {stage, ...}
    assert content["end"] == {"$ref": "#/components/schemas/RunResultOut"}
    assert content["error"] == {"$ref": "#/components/schemas/Problem"}
    assert ok["content"][JSON]["schema"] == {"$ref": "#/components/schemas/RunResultOut"}


async def test_a_run_streams_the_events_its_document_describes(
    client: AsyncTestClient[Litestar],
) -> None:
    doc = (await client.get("/schema/openapi.json")).json()
    event = doc["paths"]["/v1/threads/{thread_id}/runs"]["post"]["responses"]["200"]["content"]
    validators = {
        branch["properties"]["event"]["const"]: jsonschema_rs.validator_for(
            {**branch["properties"]["data"]["contentSchema"], "components": doc["components"]}
        )
        for branch in event[SSE]["schema"]["oneOf"]
    }
    async with aconnect_sse(
        client,
        "POST",
        "/v1/threads/t1/runs",
        json={"message": {"content": "hi"}},
        headers=headers(),
    ) as source:
        events = [(sse.event, sse.json()) async for sse in source.aiter_sse()]

    assert {name for name, _ in events} == {"metadata", "custom", "messages", "end"}
    for name, data in events:
        validators[name].validate(data)


def test_optional_parameters_are_absent_or_a_string_never_null(openapi: dict[str, Any]) -> None:
    """A header or query value is text: ``null`` would be sent as the text ``null`` (422)."""
    messages = openapi["paths"]["/v1/threads/{thread_id}/messages"]["get"]
    optional = {p["name"]: p for p in messages["parameters"] if not p["required"]}
    assert set(optional) == {"X-Locale", "limit", "before"}
    for name in ("X-Locale", "before"):
        schema = optional[name]["schema"]
        assert schema["type"] == "string", name
        assert "oneOf" not in schema, name
    assert optional["X-Locale"]["schema"]["pattern"] == "^[A-Za-z]{2,3}([-_][A-Za-z0-9]{1,8})*$"
    assert optional["before"]["schema"]["pattern"] == THREAD_SCHEMA_PATTERN
    for item in openapi["paths"].values():
        for operation in item.values():
            for parameter in operation.get("parameters", []):
                assert {"type": "null"} not in parameter["schema"].get("oneOf", []), parameter


def test_request_bodies_refuse_unknown_members(openapi: dict[str, Any]) -> None:
    schemas = openapi["components"]["schemas"]
    for body in ("RunBody", "RunMessageBody", "FeedbackBody"):
        assert schemas[body]["additionalProperties"] is False, body
    # responses may grow members: they stay open
    assert "additionalProperties" not in schemas["RunResultOut"]
    assert "additionalProperties" not in schemas["Problem"]


def test_the_not_blank_pattern_reads_alike_in_json_schema_and_python() -> None:
    """The document's pattern (ECMA-262, as JSON Schema reads it) and the server's (Python's
    ``re``) accept the same characters, those Python's ``\\S`` accepts."""
    document = jsonschema_rs.validator_for({"type": "string", "pattern": NOT_BLANK_PATTERN})
    for code in [*range(0xD800), *range(0xE000, 0x10000), 0x1F600]:
        char = chr(code)
        expected = re.search(r"\S", char) is not None
        assert (re.search(NOT_BLANK_PATTERN, char) is not None) == expected, hex(code)
        assert document.is_valid(char) == expected, hex(code)


def test_openapi_documents_paging_and_run_id(openapi: dict[str, Any]) -> None:
    messages = openapi["paths"]["/v1/threads/{thread_id}/messages"]["get"]
    limit = next(p for p in messages["parameters"] if p["name"] == "limit")
    assert (limit["schema"]["minimum"], limit["schema"]["maximum"], limit["schema"]["default"]) == (
        1,
        100,
        20,
    )
    feedback = openapi["paths"]["/v1/threads/{thread_id}/runs/{run_id}/feedback"]["post"]
    run_id = next(p for p in feedback["parameters"] if p["name"] == "run_id")
    assert "pattern" in run_id["schema"]


def test_openapi_without_auth_has_no_security(service: FakeThreadService) -> None:
    with TestClient(create_http_app(service, HttpSettings(require_token=False))) as client:
        doc = client.get("/schema/openapi.json").json()
    assert "securitySchemes" not in doc.get("components", {})
    assert all("security" not in op for item in doc["paths"].values() for op in item.values())


# --- every problem at once (issue 29, item 4) -------------------------------------------------


def errors_of(response: httpx.Response) -> dict[tuple[str, str], str]:
    """(source, key) → message of every problem a 422 names."""
    body = assert_problem(response, 422, "invalid-request")
    return {(e["source"], e["key"]): e["message"] for e in body["errors"]}


async def test_no_headers_names_both_ids(client: AsyncTestClient[Litestar]) -> None:
    sent = headers(X_Tenant_Id=None, X_User_Id=None)
    errors = errors_of(await client.get("/v1/threads/t1/messages", headers=sent))
    assert set(errors) == {("header", "X-Tenant-Id"), ("header", "X-User-Id")}
    assert "is missing" in errors["header", "X-Tenant-Id"]
    assert "1 to 128 printable characters" in errors["header", "X-User-Id"]


async def test_a_body_missing_message_says_so_beside_the_unknown_field(
    client: AsyncTestClient[Litestar], service: FakeThreadService
) -> None:
    response = await client.post("/v1/threads/t1/runs", json={"content": "hi"}, headers=headers())
    errors = errors_of(response)
    assert set(errors) == {("body", "content"), ("body", "message")}
    assert errors["body", "message"].startswith("message is missing")
    assert "unknown field 'content'" in errors["body", "content"]
    assert service.calls == []


async def test_header_path_query_and_body_problems_come_together(
    client: AsyncTestClient[Litestar],
) -> None:
    sent = headers(X_Tenant_Id="bad tenant", X_Locale="english!")
    body = {"message": {"content": "   ", "id": "."}, "run_id": "not-a-uuid", "x": 1}
    errors = errors_of(await client.post("/v1/threads/bad%20id/runs", json=body, headers=sent))
    assert set(errors) == {
        ("header", "X-Tenant-Id"),
        ("header", "X-Locale"),
        ("path", "thread_id"),
        ("body", "message.content"),
        ("body", "message.id"),
        ("body", "run_id"),
        ("body", "x"),
    }
    assert "a run id is a UUID" in errors["body", "run_id"]
    assert "length >= 36" not in str(errors)
    assert "regex" not in str(errors)


@pytest.mark.parametrize(
    ("body", "key", "words"),
    [
        ({"score": 0}, "score", "score is 1 (helpful) or -1 (not helpful); got 0"),
        ({"score": "1"}, "score", "score is 1 (helpful) or -1 (not helpful); got '1'"),
        ({"score": 1, "comment": "x" * 2001}, "comment", "at most 2000 characters"),
    ],
)
async def test_feedback_problems_are_sentences(
    client: AsyncTestClient[Litestar], body: dict[str, Any], key: str, words: str
) -> None:
    path = f"/v1/threads/t1/runs/{RUN_ID}/feedback"
    errors = errors_of(await client.post(path, json=body, headers=headers()))
    assert words in errors["body", key]


async def test_a_path_run_id_that_is_no_uuid_is_said_so(client: AsyncTestClient[Litestar]) -> None:
    path = "/v1/threads/t1/runs/1234/feedback"
    errors = errors_of(await client.post(path, json={"score": 1}, headers=headers()))
    assert errors == {("path", "run_id"): errors["path", "run_id"]}
    assert errors["path", "run_id"].startswith("a run id is a UUID")


async def test_invalid_utf8_is_located_in_the_body_not_the_string(
    client: AsyncTestClient[Litestar],
) -> None:
    body = b'{"message": {"content": "ab\xff"}}'
    response = await client.post(
        "/v1/threads/t1/runs",
        content=body,
        headers={**headers(), "Content-Type": "application/json"},
    )
    problem = assert_problem(response, 400)
    at = body.index(b"\xff")  # 26: byte 2 of the string, as msgspec counted
    assert problem["detail"].endswith(f"invalid UTF-8 at byte {at}")


@pytest.mark.parametrize("body", [b'""\x00', b'"x" 1', b"1 {}", b'{"message": 1} ]'])
async def test_a_value_followed_by_trailing_bytes_is_400_not_500(
    client: AsyncTestClient[Litestar], body: bytes
) -> None:
    """Found by test_raw_bytes in CI: the typed decoder refused the value (a ValidationError)
    before it reached the trailing bytes; walking the body then failed to decode it (500)."""
    response = await client.post(
        "/v1/threads/t1/runs",
        content=body,
        headers={**headers(), "Content-Type": "application/json"},
    )
    problem = assert_problem(response, 400)
    assert problem["detail"].startswith("The body is not JSON")


async def test_a_refused_header_is_never_echoed_whole(client: AsyncTestClient[Litestar]) -> None:
    """An attacker's header of kilobytes must not come back as kilobytes (nor a locale's)."""
    sent = headers(X_Tenant_Id="t " + "x" * 4000, X_Locale="e" + "!" * 4000)
    errors = errors_of(await client.get("/v1/threads/t1/messages", headers=sent))
    assert set(errors) == {("header", "X-Tenant-Id"), ("header", "X-Locale")}
    assert all(len(message) < 400 for message in errors.values()), errors
