"""Property-based contract tests of the HTTP API with schemathesis, in process over ASGI.

The OpenAPI document is the one the application serves (``/schema/openapi.json``). Requests are
generated from it, schema-valid ("positive") and schema-invalid ("negative") ones, for every
operation, sent to the real application of the profile (its lifespan running, real agent and
storage), and every answer is checked:

- no server error: no 5xx status, and no 5xx ``error`` event inside a 200 SSE stream;
- the status code, the content type, the documented headers and the body are as documented;
- a schema-valid request is accepted and a schema-invalid one refused;
- outside ``embedded``, a request without the service token, or with a wrong one, is refused.

Most positive requests carry the caller of the ``auth`` fixture (``X-Tenant-Id``/``X-User-Id``,
the path ``user_id`` equal to ``X-User-Id``), thread ids from a small pool, and now and then the
run id of a run that completed, so that they reach the handlers and the storage, not only the
validation; the other requests keep what schemathesis generated (random or missing headers,
invalid paths, queries and bodies).

``THREADKEEPER_SCHEMATHESIS_CASES`` sets how many requests are sent per profile (default 1,000,
DESIGN's target); ``THREADKEEPER_SCHEMATHESIS_SEED`` the Hypothesis seed (default fixed, so a
failure reproduces; set another to explore further).
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import CheckContext, not_a_server_error
from schemathesis.core.failures import Failure, FailureGroup
from schemathesis.python import asgi
from schemathesis.schemas import APIOperation, BaseSchema
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    positive_data_acceptance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.conftest import AppFactory
from threadkeeper.domain.threads import USER_ID_PATH_PATTERN, stored_user_id

CASES = int(os.environ.get("THREADKEEPER_SCHEMATHESIS_CASES", "1000"))
SEED = int(os.environ.get("THREADKEEPER_SCHEMATHESIS_SEED", "20260101"))

THREADS = ["st-0", "st-1", "st-2"]
"""Thread ids most positive requests use, so runs, transcripts, feedback and deletes meet."""

ACCEPTS: list[str | None] = [
    None,  # no Accept header at all
    "*/*",
    "text/event-stream",
    "application/json",
    "application/json, text/event-stream;q=0.5",
    "text/html",
]
"""``Accept`` of a run: not an OpenAPI parameter (3.1 forbids describing it), so chosen here and
passed to ``Case.call(headers=…)``: schemathesis' ASGI transport puts its session's default
``Accept: */*`` over an ``Accept`` set in ``case.headers``."""


SSE_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def sse_events(response: Any) -> list[tuple[str, Any]]:
    """``(event, data decoded as JSON)`` of an event stream. Lines end at CR, LF or CRLF only,
    as the SSE spec says: ``str.splitlines`` (so ``tests.api.conftest.parse_sse``) also breaks
    at U+0085, U+2028 and others, which JSON leaves unescaped in generated message text."""
    if not response.headers.get("content-type", [""])[0].startswith("text/event-stream"):
        return []
    events: list[tuple[str, Any]] = []
    name, data = "message", []
    for line in [*SSE_LINE_BREAK.split(response.text), ""]:
        if not line:
            if data:
                events.append((name, json.loads("\n".join(data))))
            name, data = "message", []
        elif line.startswith("event:"):
            name = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    return events


def sse_has_no_server_error(ctx: CheckContext, response: Any, case: schemathesis.Case) -> None:
    """A run streams its failure as an ``error`` event inside a 200 response: a server error
    all the same, which ``not_a_server_error`` (status only) cannot see."""
    try:
        events = sse_events(response)
    except json.JSONDecodeError as exc:
        raise Failure(
            operation=case.operation.label,
            title="Event data is not JSON",
            message=f"{exc}",
        ) from exc
    for event, data in events:
        status = data.get("status") if event == "error" and isinstance(data, dict) else None
        if isinstance(status, int) and status >= 500:
            raise Failure(
                operation=case.operation.label,
                title="Server error in the event stream",
                message=f"`error` event {data}",
            )


CHECKS = [
    not_a_server_error,
    sse_has_no_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    positive_data_acceptance,
    negative_data_rejection,
]
"""Not run: the checks of schemathesis' coverage and stateful phases (``missing_required_header``,
``unsupported_method``, ``use_after_free``, ``ensure_resource_availability``…), which judge the
cases those phases build, not generated ones; and ``max_response_time`` (timing is the
benchmarks' business). ``ignored_auth`` is added where a token is required."""


def config_for(token: str | None) -> dict[str, Any]:
    return {
        "checks": {
            # Statuses the contract gives schema-valid requests besides 2xx, 401, 403 (a path
            # user_id other than X-User-Id), 404 (unknown thread, message or run) and 409: 413
            # (a message over 32 KiB of UTF-8, which JSON Schema's maxLength, counting
            # characters, cannot express) and 406 (an Accept allowing neither representation;
            # Accept is not an OpenAPI parameter, so the schema cannot call it invalid).
            "positive_data_acceptance": {
                "expected-statuses": ["2xx", "401", "403", "404", "406", "409", "413", "5xx"]
            },
        },
        # Read a run's stream to its end (schemathesis stops after 20 events by default, which
        # cuts a run off mid-answer: the run is cancelled, its end or error event never seen).
        "max-stream-events": 100_000,
        # the token is the suite's own; reproductions should show it
        "output": {"sanitization": {"enabled": False}},
        **({"auth": {"openapi": {"serviceToken": {"bearer": token}}}} if token else {}),
    }


@dataclass
class Finding:
    """One distinct failure (operation, check, status) and the first request that showed it."""

    count: int
    request: str
    status: int
    body: str
    message: str


@dataclass
class Request:
    """A generated case, and headers it is sent with that are not OpenAPI parameters."""

    case: schemathesis.Case
    headers: dict[str, Any] = field(default_factory=dict)


@dataclass
class Run:
    """What the generated requests did: counts by status, completed runs, failures."""

    sent: int = 0
    statuses: Counter[tuple[str, int]] = field(default_factory=Counter)
    completed: list[tuple[str, str]] = field(default_factory=list)
    """(thread id, run id) of the fixture caller's completed runs that still exist."""
    runs: int = 0
    findings: dict[tuple[str, str, int], Finding] = field(default_factory=dict)

    def record(self, request: Request, status: int, body: str, failures: list[Failure]) -> None:
        case = request.case
        for failure in failures:
            key = (case.operation.label, failure.title, status)
            if key in self.findings:
                self.findings[key].count += 1
                continue
            self.findings[key] = Finding(
                count=1,
                request=case.as_curl_command(
                    headers={k: v for k, v in request.headers.items() if v is not None}
                ),
                status=status,
                body=body[:600],
                message=str(failure)[:1200],
            )

    def report(self) -> str:
        lines = [f"{len(self.findings)} distinct failure(s) in {self.sent} requests:"]
        for (label, title, status), finding in sorted(self.findings.items()):
            lines += [
                "",
                f"* {label}: {title} (status {status}; {finding.count} request(s))",
                f"  request:  {finding.request}",
                f"  response: {finding.status} {finding.body}",
                "  " + finding.message.replace("\n", "\n  "),
            ]
        return "\n".join(lines)


Slot = tuple[APIOperation[Any, Any, Any, Any], GenerationMode]


def slots_of(operation: APIOperation[Any, Any, Any, Any]) -> list[Slot]:
    """How often each operation and mode is drawn: an operation without inputs (the ops
    routes) has one request to send; the others twice as many positive cases as negative
    ones, and runs, the heart of the API, twice as many again."""
    if not operation.body and not any(True for _ in operation.iter_parameters()):
        return [(operation, GenerationMode.POSITIVE)]
    positive = 4 if operation.path.endswith("/runs") else 2
    return [(operation, GenerationMode.POSITIVE)] * positive + [
        (operation, GenerationMode.NEGATIVE)
    ]


@pytest.fixture
def api_schema(make_app: AppFactory, auth: dict[str, str]) -> Iterator[BaseSchema]:
    """The schema the app serves, loaded through schemathesis' ASGI client, which starts the
    app's lifespan on its own event-loop thread; every request of the test runs on that loop,
    and the lifespan ends with the fixture (before the profile's database goes)."""
    token = auth.get("Authorization", "").removeprefix("Bearer ") or None
    config = schemathesis.Config.from_dict(config_for(token))
    try:
        yield schemathesis.openapi.from_asgi("/schema/openapi.json", make_app(), config=config)
    finally:
        asgi.shutdown_lifespans()


def pin(request: Request, rnd: random.Random, auth: dict[str, str], run: Run) -> None:
    """Steer a positive case to the handlers: the fixture's caller, the path's own user, a
    thread of the pool or one with a completed run; positive cases stay schema-valid."""
    case = request.case
    if "X-Tenant-Id" in case.headers and rnd.random() < 0.75:
        case.headers["X-Tenant-Id"] = auth["X-Tenant-Id"]
        case.headers["X-User-Id"] = auth["X-User-Id"]
    if "user_id" in case.path_parameters and rnd.random() < 0.75:
        user = case.headers["X-User-Id"]  # a path names one it cannot carry by its stored form
        fits = re.fullmatch(USER_ID_PATH_PATTERN, user)
        case.path_parameters["user_id"] = user if fits else stored_user_id(user)
    if "thread_id" in case.path_parameters and rnd.random() < (
        0.25 if case.method == "DELETE" else 0.5  # deleting a thread the others need: now and then
    ):
        # a run goes to a thread of the pool; the others, mostly to a thread with a run
        threads = [thread for thread, _ in run.completed]
        if case.path.endswith("/runs") or not threads or rnd.random() < 0.25:
            threads = THREADS
        case.path_parameters["thread_id"] = rnd.choice(threads)
    if "before" in case.query and rnd.random() < 0.5:
        del case.query["before"]  # a generated cursor is never a message of the thread: 404
    if "run_id" in case.path_parameters and run.completed and rnd.random() < 0.75:
        thread_id, run_id = rnd.choice(run.completed)
        case.path_parameters.update(thread_id=thread_id, run_id=run_id)
    if case.path.endswith("/runs") and isinstance(case.body, dict):
        request.headers["Accept"] = rnd.choice(ACCEPTS)  # None: no header
        if run.completed and rnd.random() < 0.2:
            # a retry: the stored body of a completed run (or a 409 on another thread)
            thread_id, run_id = rnd.choice(run.completed)
            case.path_parameters["thread_id"] = thread_id
            case.body["run_id"] = run_id


def as_fixture_caller(case: schemathesis.Case, auth: dict[str, str]) -> bool:
    headers = case.headers or {}
    return all(headers.get(name) == auth[name] for name in ("X-Tenant-Id", "X-User-Id"))


def follow(case: schemathesis.Case, response: Any, auth: dict[str, str], run: Run) -> None:
    """Keep ``run.completed`` true: add a completed run, drop the runs a delete took."""
    if not as_fixture_caller(case, auth) or response.status_code >= 300:
        return
    if case.method == "DELETE" and case.path == "/v1/users/{user_id}":
        run.completed.clear()
    elif case.method == "DELETE" and case.path == "/v1/threads/{thread_id}":
        gone = case.path_parameters["thread_id"]
        run.completed[:] = [(thread, run_id) for thread, run_id in run.completed if thread != gone]
    elif (run_id := completed_run(case, response)) is not None:
        run.completed.append((case.path_parameters["thread_id"], run_id))
        run.runs += 1


def completed_run(case: schemathesis.Case, response: Any) -> str | None:
    """The run id a 200 run answered with."""
    if not case.path.endswith("/runs") or response.status_code != 200:
        return None
    content_type = response.headers.get("content-type", [""])[0]
    if content_type.startswith("application/json"):
        return str(response.json()["run_id"])
    try:
        ends = [data for event, data in sse_events(response) if event == "end"]
    except json.JSONDecodeError:
        return None  # a failure of its own (sse_has_no_server_error)
    return str(ends[0]["run_id"]) if ends else None


def test_the_api_holds_to_its_openapi_document(
    api_schema: BaseSchema, auth: dict[str, str], profile: str
) -> None:
    operations = [result.ok() for result in api_schema.get_all_operations()]
    slots = [slot for operation in operations for slot in slots_of(operation)]
    checks = [*CHECKS, ignored_auth] if "Authorization" in auth else CHECKS
    run = Run()
    # The steering's own coin: Hypothesis leans towards its simplest values (0, False, the
    # first element), which would skew the odds; seeded, so a run replays the same way.
    rnd = random.Random(SEED)

    @st.composite
    def requests(draw: st.DrawFn) -> Request:
        operation, mode = draw(st.sampled_from(slots))
        request = Request(draw(operation.as_strategy(generation_mode=mode)))
        if mode is GenerationMode.POSITIVE:
            pin(request, rnd, auth, run)
        return request

    @hypothesis.seed(SEED)
    @hypothesis.settings(
        max_examples=CASES,
        deadline=None,
        database=None,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis.given(request=requests())
    def send(request: Request) -> None:
        case = request.case
        run.sent += 1
        try:
            response = case.call(headers=request.headers)
        except Exception as exc:  # the app failed to answer at all
            run.statuses[(case.operation.label, 0)] += 1
            failure = Failure(
                operation=case.operation.label, title="No response", message=repr(exc)
            )
            run.record(request, 0, "", [failure])
            return
        run.statuses[(case.operation.label, response.status_code)] += 1
        try:
            case.validate_response(response, checks=checks, headers=request.headers)
        except FailureGroup as group:
            run.record(request, response.status_code, response.text, list(group.exceptions))
        follow(case, response, auth, run)

    started = time.monotonic()
    send()
    elapsed = time.monotonic() - started

    print(f"\nschemathesis [{profile}]: {run.sent} requests in {elapsed:.1f} s, seed {SEED}")
    for label in sorted({label for label, _ in run.statuses}):
        statuses = sorted((s, n) for (op, s), n in run.statuses.items() if op == label)
        print(f"  {label}: " + ", ".join(f"{s}×{n}" for s, n in statuses))
    print(f"  {run.runs} runs completed; {len(run.findings)} distinct failure(s)")
    assert run.sent >= CASES, f"only {run.sent} of {CASES} requests were generated"
    if run.findings:
        pytest.fail(run.report(), pytrace=False)
