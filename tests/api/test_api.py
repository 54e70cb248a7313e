"""Every endpoint, status code and SSE sequence of DESIGN.md's HTTP contract, end to end
through the real agent and storage of each profile."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.api.conftest import TENANT, USER, AppFactory, parse_sse, run
from tests.support.followups import asettled_memory
from threadkeeper.domain.retention import SweepReport

Client = AsyncTestClient[Litestar]
DENTAL = "Is dental treatment covered by my health insurance?"


def thread() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


async def test_a_streamed_run(client: Client) -> None:
    name = thread()
    response = await client.post(
        f"/v1/threads/{name}/runs", json={"message": {"content": DENTAL}}, headers={"Accept": "*/*"}
    )
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(response.text)
    kinds = [e.event for e in events]
    assert kinds[0] == "metadata"
    assert kinds[-1] == "end"
    assert set(kinds[1:-1]) <= {"messages", "custom"}
    assert "messages" in kinds
    metadata, end = events[0].data, events[-1].data
    assert metadata["thread_id"] == name
    uuid.UUID(metadata["run_id"])
    assert end["run_id"] == metadata["run_id"]
    assert end["thread_id"] == name
    assert end["status"] == "answered"
    message = end["message"]
    assert message["role"] == "ai"
    streamed = "".join(e.data["delta"] for e in events if e.event == "messages")
    assert streamed == message["content"]
    assert all(e.data["id"] == message["id"] for e in events if e.event == "messages")
    assert message["citations"], "an answer from the knowledge base cites it"
    assert set(message["citations"][0]) == {"chunk_id", "doc_id", "title"}
    assert set(end["usage"]) == {"input_tokens", "output_tokens", "source"}
    assert end["usage"]["output_tokens"] > 0
    stages = [e.data for e in events if e.event == "custom"]
    assert {"stage": "retrieval", "status": "start"} in stages
    assert any(s["stage"] == "retrieval" and s["status"] == "end" for s in stages)


async def test_json_mode_and_the_transcript(client: Client) -> None:
    name = thread()
    body = await run(client, name, DENTAL)
    assert body["status"] == "answered"
    page = (await client.get(f"/v1/threads/{name}/messages")).json()
    assert [m["role"] for m in page["messages"]] == ["human", "ai"]
    assert page["messages"][0]["content"] == DENTAL
    assert page["messages"][1]["id"] == body["message"]["id"]
    assert page["messages"][1]["citations"] == body["message"]["citations"]
    assert page["next_before"] is None
    assert all(m["created_at"] for m in page["messages"])


async def test_accept_picks_the_best_match(client: Client) -> None:
    name = thread()
    response = await client.post(
        f"/v1/threads/{name}/runs",
        json={"message": {"content": DENTAL}},
        headers={"Accept": "application/json, text/event-stream;q=0.5"},
    )
    assert response.headers["content-type"].startswith("application/json")
    response = await client.post(
        f"/v1/threads/{name}/runs",
        json={"message": {"content": "And orthodontics?"}},
        headers={"Accept": "text/event-stream"},
    )
    assert response.headers["content-type"].startswith("text/event-stream")


async def test_paging_walks_back_with_next_before(client: Client) -> None:
    name = thread()
    for question in (DENTAL, "What about maternity cover?", "How do I file a claim?"):
        await run(client, name, question)
    newest = (await client.get(f"/v1/threads/{name}/messages", params={"limit": 4})).json()
    assert len(newest["messages"]) == 4
    assert newest["messages"][0]["content"] == "What about maternity cover?"
    older = (
        await client.get(
            f"/v1/threads/{name}/messages",
            params={"limit": 4, "before": newest["next_before"]},
        )
    ).json()
    assert older["messages"][0]["content"] == DENTAL
    assert len(older["messages"]) == 2
    assert older["next_before"] is None


async def test_unknown_thread_and_cursor_are_404(client: Client) -> None:
    name = thread()
    missing = await client.get(f"/v1/threads/{name}/messages")
    assert missing.status_code == 404
    assert missing.headers["content-type"].startswith("application/problem+json")
    await run(client, name, DENTAL)
    cursor = await client.get(f"/v1/threads/{name}/messages", params={"before": "nope"})
    assert cursor.status_code == 404


async def test_a_completed_run_id_returns_its_stored_body(client: Client) -> None:
    name = thread()
    run_id = str(uuid.uuid4())
    first = await run(client, name, DENTAL, run_id=run_id)
    again = await run(client, name, DENTAL, run_id=run_id)
    assert again == first
    page = (await client.get(f"/v1/threads/{name}/messages")).json()
    assert len(page["messages"]) == 2


async def test_a_run_id_is_an_idempotency_key_scoped_to_the_thread(client: Client) -> None:
    """The same run_id in another thread, user or tenant is an independent run, stored like
    any other (issue 9: redis-mysql answered 200 and never archived it); the other scope's
    answer is never returned."""
    run_id, name = str(uuid.uuid4()), thread()
    first = await run(client, name, DENTAL, run_id=run_id)
    scopes = [
        (thread(), {}),  # another thread of the same user
        (name, {"X-User-Id": "another-user"}),
        (name, {"X-Tenant-Id": "another-tenant"}),
    ]
    for other_thread, headers in scopes:
        response = await client.post(
            f"/v1/threads/{other_thread}/runs",
            json={"message": {"content": "How do I file a claim?"}, "run_id": run_id},
            headers={"Accept": "application/json", **headers},
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["run_id"] == run_id
        assert body["message"] != first["message"], "another scope's answer leaked"
        page = await client.get(f"/v1/threads/{other_thread}/messages", headers=headers)
        assert page.status_code == 200, page.text
        humans = [m["content"] for m in page.json()["messages"] if m["role"] == "human"]
        assert humans == ["How do I file a claim?"], "the round was stored in its own thread"
    mine = (await client.get(f"/v1/threads/{name}/messages")).json()["messages"]
    assert [m["content"] for m in mine if m["role"] == "human"] == [DENTAL]


@pytest.mark.parametrize(
    ("retry", "field"),
    [
        ({"content": "How do I file a claim?"}, "message.content"),
        ({"content": DENTAL, "id": "m-other"}, "message.id"),
    ],
)
async def test_a_run_id_reused_with_another_request_is_409(
    client: Client, retry: dict[str, str], field: str
) -> None:
    name, run_id = thread(), str(uuid.uuid4())
    await run(client, name, DENTAL, run_id=run_id)
    response = await client.post(
        f"/v1/threads/{name}/runs",
        json={"message": retry, "run_id": run_id},
        headers={"Accept": "application/json"},
    )
    assert response.status_code == 409, response.text
    problem = response.json()
    assert problem["type"] == "urn:threadkeeper:problem:idempotency-mismatch"
    assert problem["field"] == field
    assert DENTAL not in response.text, "the stored request is not echoed"
    page = (await client.get(f"/v1/threads/{name}/messages")).json()
    assert len(page["messages"]) == 2, "nothing new was stored"


async def test_a_retry_with_the_same_message_id_returns_the_stored_answer(
    client: Client,
) -> None:
    name, run_id = thread(), str(uuid.uuid4())
    first = await run(client, name, DENTAL, run_id=run_id, message={"id": "m-7"})
    again = await run(client, name, DENTAL, run_id=run_id, message={"id": "m-7"})
    assert again == first


async def test_a_message_id_already_in_the_thread_is_409(client: Client) -> None:
    name = thread()
    await run(client, name, DENTAL, message={"id": "m-1"})
    response = await client.post(
        f"/v1/threads/{name}/runs",
        json={"message": {"content": "again", "id": "m-1"}},
        headers={"Accept": "application/json"},
    )
    assert response.status_code == 409
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_oversized_messages_are_413_before_anything_is_stored(
    make_app: AppFactory, auth: dict[str, str]
) -> None:
    async with AsyncTestClient(make_app(token_budget=300), timeout=30) as client:
        client.headers.update(auth)
        name = thread()
        too_long = await client.post(
            f"/v1/threads/{name}/runs", json={"message": {"content": "x" * (32 * 1024 + 1)}}
        )
        assert too_long.status_code == 413
        over_budget = await client.post(
            f"/v1/threads/{name}/runs",
            json={"message": {"content": "insurance claim " * 400}},
        )
        assert over_budget.status_code == 413
        assert (await client.get(f"/v1/threads/{name}/messages")).status_code == 404


async def test_every_413_is_counted_as_a_run(make_app: AppFactory, auth: dict[str, str]) -> None:
    """A message over 32 KiB and a body over the body limit are runs refused, counted in
    ``threadkeeper_runs_total`` like every other refusal (issue 27: both were missing)."""
    from tests.support.metrics import total

    def counted() -> float:
        return total("threadkeeper.runs", **{"http.response.status_code": 413})

    async with AsyncTestClient(make_app(), timeout=30) as client:
        client.headers.update(auth)
        before = counted()
        too_long = await client.post(
            f"/v1/threads/{thread()}/runs", json={"message": {"content": "x" * (32 * 1024 + 1)}}
        )
        assert too_long.status_code == 413
        assert counted() == before + 1
        too_big = await client.post(
            f"/v1/threads/{thread()}/runs",
            json={"message": {"content": "x" * (2 * 1024 * 1024)}},
        )
        assert too_big.status_code == 413
        assert counted() == before + 2


@pytest.mark.parametrize(
    ("path", "headers", "body"),
    [
        ("/v1/threads/bad id/runs", {}, {"message": {"content": "hi"}}),
        ("/v1/threads/ok/runs", {"X-Tenant-Id": "bad tenant!"}, {"message": {"content": "hi"}}),
        ("/v1/threads/ok/runs", {"X-User-Id": ""}, {"message": {"content": "hi"}}),
        ("/v1/threads/ok/runs", {}, {"message": {"content": "   "}}),
        ("/v1/threads/ok/runs", {}, {"message": {"content": "hi"}, "run_id": "not-a-uuid"}),
        ("/v1/threads/ok/runs", {}, {"message": {"content": "hi"}, "extra": 1}),
        ("/v1/threads/ok/runs", {}, {"message": {}}),
    ],
)
async def test_invalid_input_is_422(
    client: Client, path: str, headers: dict[str, str], body: dict[str, object]
) -> None:
    response = await client.post(path, json=body, headers=headers)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")


async def test_a_body_that_is_not_json_is_400(client: Client) -> None:
    response = await client.post(
        "/v1/threads/ok/runs", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 400


@pytest.mark.parametrize("limit", ["0", "101", "x", "1e2", "2.0", " 5", "+5", "05x"])
async def test_limit_out_of_range_is_422(client: Client, limit: str) -> None:
    response = await client.get("/v1/threads/ok/messages", params={"limit": limit})
    assert response.status_code == 422, response.text


async def test_a_repeated_limit_is_422(client: Client) -> None:
    response = await client.get("/v1/threads/ok/messages?limit=10&limit=20")
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["key"] == "limit"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"message": {"content": "caf\xc3\xa9 \xff"}}',  # invalid UTF-8 inside a string
        b'{"message": {"content": "\xc0\xaf"}}',  # an overlong encoding of "/"
        b'{"message": {"content": "\xed\xa0\x80"}}',  # a UTF-16 surrogate, encoded
    ],
)
async def test_invalid_utf8_in_a_body_is_400(client: Client, raw: bytes) -> None:
    body = raw.decode("unicode_escape").encode("latin-1")  # the bytes as written above
    for path in ("/v1/threads/ok/runs", f"/v1/threads/ok/runs/{uuid.uuid4()}/feedback"):
        if path.endswith("feedback"):
            body = body.replace(b'{"message": {"content": ', b'{"score": 1, "comment": ')
            body = body[:-1]
        response = await client.post(
            path, content=body, headers={"Content-Type": "application/json"}
        )
        assert response.status_code == 400, (path, response.status_code, response.text)
        assert response.headers["content-type"].startswith("application/problem+json")


async def test_delete_thread_is_204_also_when_gone(client: Client) -> None:
    name = thread()
    await run(client, name, DENTAL)
    assert (await client.delete(f"/v1/threads/{name}")).status_code == 204
    assert (await client.get(f"/v1/threads/{name}/messages")).status_code == 404
    assert (await client.delete(f"/v1/threads/{name}")).status_code == 204


async def test_feedback(client: Client) -> None:
    name = thread()
    body = await run(client, name, DENTAL)
    url = f"/v1/threads/{name}/runs/{body['run_id']}/feedback"
    assert (await client.post(url, json={"score": 1, "comment": "clear"})).status_code == 204
    assert (await client.post(url, json={"score": -1})).status_code == 204
    assert (await client.post(url, json={"score": 5})).status_code == 422
    unknown = f"/v1/threads/{name}/runs/{uuid.uuid4()}/feedback"
    assert (await client.post(unknown, json={"score": 1})).status_code == 404


async def test_clarifying_then_escalation(client: Client) -> None:
    name = thread()
    first = await run(client, name, "blorp zzxq?")
    assert first["status"] == "clarifying"
    assert "handoff_context" not in first
    person = await run(client, name, "I want to talk to a human agent please")
    assert person["status"] == "escalate"
    handoff = person["handoff_context"]
    assert set(handoff) == {"conversation_summary", "profile", "recent_messages"}
    assert handoff["recent_messages"][0]["content"] == "blorp zzxq?"


@pytest.mark.parametrize(
    "text",
    ["می‌خواهم با یک کارشناس صحبت کنم", "我要转人工客服", "Can I speak to a real person?"],
)
async def test_escalation_in_three_languages(client: Client, text: str) -> None:
    assert (await run(client, thread(), text))["status"] == "escalate"


async def test_memory_is_remembered_across_threads_then_reset(client: Client) -> None:
    await run(client, thread(), "I have two kids. Does my health insurance cover dental care?")
    memory = await asettled_memory(client, USER)  # written after the answer: waited for
    assert set(memory) == {"profile", "facts", "pending"}
    keys = {item["key"] for item in memory["profile"]}
    assert "language" in keys
    assert memory["facts"], "the product asked about is remembered"
    source = memory["facts"][0]["source"]
    assert set(source) == {"thread_id", "message_id", "at"}
    # an escalation hands the profile over, and its stored body keeps it for retries
    handoff_thread, run_id = thread(), str(uuid.uuid4())
    escalated = await run(client, handoff_thread, "I want to talk to a human", run_id=run_id)
    assert escalated["status"] == "escalate"
    assert escalated["handoff_context"]["profile"]
    reset = await client.delete(f"/v1/users/{USER}/memory")
    assert reset.status_code == 200
    assert reset.json()["memory_items"] >= 2
    assert (await client.get(f"/v1/users/{USER}/memory")).json() == {
        "profile": [],
        "facts": [],
        "pending": False,
    }
    # the reset reaches the run records: a retry of the run gets its body without the profile
    retried = await run(client, handoff_thread, "I want to talk to a human", run_id=run_id)
    assert retried["run_id"] == run_id
    assert retried["handoff_context"]["profile"] == []
    assert (
        retried["handoff_context"]["recent_messages"]
        == escalated["handoff_context"]["recent_messages"]
    )


async def test_personal_data_is_never_remembered(client: Client) -> None:
    await run(client, thread(), "My national code is 0499370899 and I have diabetes; dental?")
    memory = await asettled_memory(client, USER)
    dumped = str(memory)
    assert "0499370899" not in dumped
    assert "diabetes" not in dumped


async def test_user_routes_need_the_callers_own_id(client: Client) -> None:
    assert (await client.get("/v1/users/someone-else/memory")).status_code == 403
    assert (await client.delete("/v1/users/someone-else")).status_code == 403


async def test_erasure_returns_a_receipt_and_spares_others(client: Client) -> None:
    mine = [thread(), thread()]
    for name in mine:
        await run(client, name, DENTAL)
    other = thread()
    other_headers = {"X-Tenant-Id": TENANT, "X-User-Id": "user-2"}
    response = await client.post(
        f"/v1/threads/{other}/runs",
        json={"message": {"content": DENTAL}},
        headers={**other_headers, "Accept": "application/json"},
    )
    assert response.status_code == 200
    receipt = (await client.delete(f"/v1/users/{USER}")).json()
    assert receipt["threads"] == 2
    assert receipt["messages"] == 4
    assert set(receipt) == {"threads", "messages", "memory_items", "feedback", "remaining"}
    assert receipt["remaining"], "the verification names the stores it checked"
    assert set(receipt["remaining"].values()) == {0}
    for name in mine:
        assert (await client.get(f"/v1/threads/{name}/messages")).status_code == 404
    kept = await client.get(f"/v1/threads/{other}/messages", headers=other_headers)
    assert kept.status_code == 200


async def test_a_thread_id_is_scoped_to_its_user_and_tenant(client: Client) -> None:
    name = thread()
    await run(client, name, DENTAL)
    for headers in (
        {"X-Tenant-Id": TENANT, "X-User-Id": "intruder"},
        {"X-Tenant-Id": "other-tenant", "X-User-Id": USER},
    ):
        response = await client.get(f"/v1/threads/{name}/messages", headers=headers)
        assert response.status_code == 404


KEPT = {
    "embedded": {"checkpoints", "messages", "run_records", "feedback"},
    "postgres": {"checkpoints", "messages", "run_records", "feedback"},
    "redis-mysql": {"checkpoints", "run_records", "archive", "feedback"},
}
"""The kinds each profile keeps for a thread of plain answers with feedback (redis-mysql's
audit needs a tool call, which the builtin model does not make)."""


async def test_a_threads_storage_by_kind(client: Client, profile: str) -> None:
    name = thread()
    first = await run(client, name, DENTAL)
    noted = await client.post(
        f"/v1/threads/{name}/runs/{first['run_id']}/feedback", json={"score": 1}
    )
    assert noted.status_code == 204
    response = await client.get(f"/v1/threads/{name}/storage")
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"thread_id", "bytes", "total", "logical_bytes", "logical_total"}
    assert body["thread_id"] == name
    sizes = body["bytes"]
    assert list(sizes) == ["checkpoints", "messages", "run_records", "archive", "audit", "feedback"]
    assert {kind for kind, size in sizes.items() if size > 0} == KEPT[profile]
    assert body["total"] == sum(sizes.values())
    await run(client, name, "How do I file a claim?")
    grown = (await client.get(f"/v1/threads/{name}/storage")).json()
    assert grown["total"] > body["total"]
    assert grown["bytes"]["run_records"] > sizes["run_records"]


async def test_a_threads_storage_says_its_logical_size_beside_the_compressed_one(
    client: Client, profile: str
) -> None:
    """A repetitive text deflates to a few hundred bytes in the ledger and the run record;
    ``logical_bytes`` counts it inflated, as the text it is."""
    name = thread()
    text = "Please check whether my dental claim is covered. " * 240  # 12,000 characters
    await run(client, name, text)
    body = (await client.get(f"/v1/threads/{name}/storage")).json()
    stored, logical = body["bytes"], body["logical_bytes"]
    assert list(logical) == list(stored)
    assert body["logical_total"] == sum(logical.values())
    assert all(logical[kind] >= stored[kind] for kind in stored)
    assert body["logical_total"] >= len(text)
    if profile in ("embedded", "postgres"):  # the ledger keeps the message deflated
        assert stored["messages"] < len(text) // 4
        assert logical["messages"] >= len(text)


async def test_a_threads_storage_is_404_for_an_unknown_or_someone_elses_thread(
    client: Client,
) -> None:
    name = thread()
    unknown = await client.get(f"/v1/threads/{name}/storage")
    assert unknown.status_code == 404
    assert unknown.headers["content-type"].startswith("application/problem+json")
    await run(client, name, DENTAL)
    assert (await client.get(f"/v1/threads/{name}/storage")).status_code == 200
    for headers in (
        {"X-Tenant-Id": TENANT, "X-User-Id": "intruder"},
        {"X-Tenant-Id": "other-tenant", "X-User-Id": USER},
    ):
        theirs = await client.get(f"/v1/threads/{name}/storage", headers=headers)
        assert theirs.status_code == 404
        assert theirs.json() == unknown.json()
    assert (await client.delete(f"/v1/threads/{name}")).status_code == 204
    gone = await client.get(f"/v1/threads/{name}/storage")
    assert gone.status_code == 404
    assert gone.json() == unknown.json()


async def test_ops_routes_need_no_headers(make_app: AppFactory, profile: str) -> None:
    async with AsyncTestClient(make_app(), timeout=30) as client:
        assert (await client.get("/health/live")).status_code == 200
        assert (await client.get("/health/ready")).status_code == 200
        schema = (await client.get("/schema/openapi.json")).json()
        paths = set(schema["paths"])
        assert {
            "/v1/threads/{thread_id}/runs",
            "/v1/threads/{thread_id}/messages",
            "/v1/threads/{thread_id}",
            "/v1/threads/{thread_id}/runs/{run_id}/feedback",
            "/v1/users/{user_id}/memory",
            "/v1/users/{user_id}",
        } <= paths
        assert (await client.get("/metrics")).status_code == 200
        unauthenticated = (await client.get("/v1/threads/x/messages")).status_code
        assert unauthenticated == (422 if profile == "embedded" else 401)


async def test_restart_keeps_threads_and_memory(make_app: AppFactory, auth: dict[str, str]) -> None:
    name = thread()
    async with AsyncTestClient(make_app(), timeout=30) as client:
        client.headers.update(auth)
        await run(client, name, "I have two kids. Does my health insurance cover dental care?")
    async with AsyncTestClient(make_app(), timeout=30) as client:
        client.headers.update(auth)
        page = (await client.get(f"/v1/threads/{name}/messages")).json()
        assert len(page["messages"]) == 2
        memory = await asettled_memory(client, USER)  # done here if the first did not
        assert memory["facts"]
        await run(client, name, "And maternity?")
        page = (await client.get(f"/v1/threads/{name}/messages")).json()
        assert len(page["messages"]) == 4


async def test_the_in_app_sweep_deletes_idle_threads(
    make_app: AppFactory, auth: dict[str, str]
) -> None:
    app = make_app(retention_days=30, retention_sweep_minutes=60)
    async with AsyncTestClient(app, timeout=30) as client:
        client.headers.update(auth)
        name = thread()
        await run(client, name, DENTAL)
        sweeper = app.state.sweeper

        async def sweep_once() -> SweepReport:  # on the app's own event loop (its pools')
            return await asyncio.to_thread(client.blocking_portal.call, sweeper.run_once)

        assert (await sweep_once()).deleted.threads == 0, "active within 30 days"
        sweeper.older_than = timedelta(0)
        report = await sweep_once()
        assert report.deleted.threads == 1
        assert report.deleted.messages == 2
        assert (await client.get(f"/v1/threads/{name}/messages")).status_code == 404


async def test_ids_with_dots_work_everywhere(client: Client, auth: dict[str, str]) -> None:
    """Found by schemathesis: LangGraph's store refuses dots in namespace labels."""
    headers = {**auth, "X-Tenant-Id": "acme.eu", "X-User-Id": "jane.doe"}
    response = await client.post(
        "/v1/threads/t.1/runs",
        json={"message": {"content": "I have two kids. Is dental covered?"}},
        headers={**headers, "Accept": "application/json"},
    )
    assert response.status_code == 200, response.text
    memory = await asettled_memory(client, "jane.doe", headers)
    assert memory["facts"]
    other = await client.get(
        "/v1/users/jane-doe/memory", headers={**headers, "X-User-Id": "jane-doe"}
    )
    assert other.json() == {"profile": [], "facts": [], "pending": False}
    assert (await client.delete("/v1/users/jane.doe/memory", headers=headers)).status_code == 200
    receipt = await client.delete("/v1/users/jane.doe", headers=headers)
    assert receipt.status_code == 200
    assert receipt.json()["threads"] == 1


@pytest.mark.parametrize("user", ["erin@example.com", "auth0|5f3c9a1e", "Ünïcødé 用户", "org/7"])
async def test_user_ids_real_backends_use_work_everywhere(
    client: Client, auth: dict[str, str], user: str
) -> None:
    """Issue 29, item 3: such ids were refused in regex words. Sent as UTF-8 in the header
    and percent-encoded in the path; their data is theirs alone — not a sibling id's, not
    the user whose stored form an attacker sends as an id."""
    from urllib.parse import quote

    from threadkeeper.domain.threads import stored_user_id

    def as_header(value: str) -> bytes:  # httpx sends str headers as ASCII only
        return value.encode("utf-8")

    headers = {**auth, "X-User-Id": as_header(user)}
    name = thread()
    response = await client.post(
        f"/v1/threads/{name}/runs",
        json={"message": {"content": "I have two kids. Is dental covered?"}},
        headers={**headers, "Accept": "application/json"},
    )
    assert response.status_code == 200, response.text

    def named(value: str) -> str:  # a path cannot carry "/" (routing decodes %2F first)
        return stored_user_id(value) if "/" in value else quote(value, safe="")

    path = f"/v1/users/{named(user)}"
    memory = await asettled_memory(client, named(user), headers)
    assert memory["facts"]
    for other in (user + "x", user.upper(), stored_user_id(user), "~" + "0" * 64):
        intruder = {**auth, "X-User-Id": as_header(other)}
        assert (
            await client.get(f"/v1/threads/{name}/messages", headers=intruder)
        ).status_code == 404
        seen = await client.get(f"/v1/users/{named(other)}/memory", headers=intruder)
        assert seen.json() == {"profile": [], "facts": [], "pending": False}, other
        refused = await client.get(f"{path}/memory", headers=intruder)
        if refused.status_code == 200:  # "~<hex>" read as the intruder's own raw id: theirs
            assert refused.json() == {"profile": [], "facts": [], "pending": False}, other
        else:
            assert refused.status_code == 403  # the path's user is not the caller
    receipt = await client.delete(path, headers=headers)
    assert receipt.status_code == 200, receipt.text
    assert receipt.json()["threads"] == 1


@pytest.mark.parametrize(
    ("user", "words"),
    [("a\tb", "control character at 1"), ("x" * 129, "has 129 characters")],
)
async def test_a_refused_user_id_is_told_in_words(client: Client, user: str, words: str) -> None:
    response = await client.get(f"/v1/threads/{thread()}/messages", headers={"X-User-Id": user})
    assert response.status_code == 422, response.text
    (error,) = response.json()["errors"]
    assert error["key"] == "X-User-Id"
    assert error["source"] == "header"
    assert words in error["message"]
    assert "1 to 128 printable characters" in error["message"]


async def test_a_nul_in_a_feedback_comment_is_422(client: Client) -> None:
    name = thread()
    body = await run(client, name, DENTAL)
    response = await client.post(
        f"/v1/threads/{name}/runs/{body['run_id']}/feedback",
        json={"score": 1, "comment": "bad\u0000comment"},
    )
    assert response.status_code == 422
