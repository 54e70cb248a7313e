"""The ``/v1`` route handlers: headers and paths into a ``Caller`` and arguments, results into
bodies. Everything else happens behind ``ThreadService``."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.di import NamedDependency
from litestar.exceptions import ClientException, HTTPException
from litestar.openapi import ResponseSpec
from litestar.params import (
    HeaderParameter,
    JSONBody,
    PathParameter,
    QueryParameter,
    SkipValidation,
)
from litestar.types import BeforeRequestHookHandler

from threadkeeper.app.http.negotiation import JSON, choose_representation
from threadkeeper.app.http.openapi import ContractOperation, RunOperation, problems
from threadkeeper.app.http.problems import body_errors, http_problem, invalid
from threadkeeper.app.http.ratelimit import RunRateLimit
from threadkeeper.app.http.request_problems import (
    body_problems,
    earlier_problems,
    header_text,
    invalid_utf8_at,
    refuse,
)
from threadkeeper.app.http.schemas import (
    ID_PATTERN,
    LOCALE_HEADER,
    LOCALE_PATTERN,
    TENANT_HEADER,
    THREAD_ID_PATTERN,
    USER_HEADER,
    UUID_PATTERN,
    ErasureReceiptOut,
    FeedbackBody,
    MemoryOut,
    MemoryResetOut,
    MessagesPageOut,
    RunBody,
    RunResultOut,
    StorageBytesOut,
    ThreadStorageOut,
    exact,
    memory_out,
    message_out,
)
from threadkeeper.app.http.sse import EventRelay
from threadkeeper.app.service import (
    Caller,
    MessageTooLong,
    RunMessage,
    RunRequest,
    ThreadService,
)
from threadkeeper.domain.threads import (
    HASHED_USER_ID,
    MAX_ID_CHARS,
    USER_ID_PATH_PATTERN,
    USER_ID_PATTERN,
    stored_user_id,
)
from threadkeeper.domain.transcript import MAX_PAGE

# --- parameters -----------------------------------------------------------------------------

TenantHeader = Annotated[
    str,
    HeaderParameter(
        name=TENANT_HEADER,
        pattern=ID_PATTERN,
        min_length=1,
        max_length=128,
        description="The tenant the call acts for; scopes everything.",
    ),
]
UserHeader = Annotated[
    str,
    HeaderParameter(
        name=USER_HEADER,
        min_length=1,
        max_length=4 * MAX_ID_CHARS,  # UTF-8 bytes, as the header arrives; 128 characters
        # the rule, documented; checked once the header is read as UTF-8 (provide_caller)
        schema_extra={"pattern": USER_ID_PATTERN, "maxLength": MAX_ID_CHARS},
        description="The end user the call acts for: any id the backend uses, 1 to 128 "
        "printable characters (UTF-8), e.g. `erin@example.com` or `auth0|5f3c`.",
    ),
]
LocaleHeader = Annotated[
    str | None,
    HeaderParameter(
        name=LOCALE_HEADER,
        pattern=LOCALE_PATTERN,
        max_length=64,
        required=False,
        description="The user's locale, loosely BCP 47 (en, fa-IR, zh-Hans-CN).",
    ),
]
ThreadIdPath = Annotated[
    str,
    PathParameter(
        pattern=THREAD_ID_PATTERN,
        min_length=1,
        max_length=128,
        description="The caller's thread id (stored under the tenant, and the user by default).",
    ),
]
RunIdPath = Annotated[
    str, PathParameter(pattern=UUID_PATTERN, description="A run id (UUID).", min_length=36)
]
UserIdPath = Annotated[
    str,
    PathParameter(
        min_length=1,
        max_length=MAX_ID_CHARS,
        schema_extra={"pattern": USER_ID_PATH_PATTERN},  # checked by _own_user, in words
        description="Must equal X-User-Id (403 otherwise), percent-encoded "
        "(`erin%40example.com`); an id with `/`, `?` or `#` (or `.`, `..`) by its stored "
        "form `~<sha256>`.",
    ),
]
LimitQuery = Annotated[
    int, QueryParameter(ge=1, le=MAX_PAGE, description=f"Messages per page, 1–{MAX_PAGE}.")
]
BeforeQuery = Annotated[
    str | None,
    QueryParameter(
        pattern=THREAD_ID_PATTERN,
        min_length=1,
        max_length=128,
        required=False,
        description="A message id: the page ends just before it (`next_before` of a page).",
    ),
]


Service = SkipValidation[NamedDependency[ThreadService]]
"""The service, injected as is (a Protocol cannot be validated)."""
CallerDep = NamedDependency[Caller]
RunRateLimitDep = SkipValidation[NamedDependency[RunRateLimit | None]]
"""``THREADKEEPER_RATE_LIMIT_PER_MINUTE`` (``None``: off)."""
SseHeartbeatDep = SkipValidation[NamedDependency[float]]
"""``THREADKEEPER_SSE_HEARTBEAT_SECONDS``."""


async def provide_caller(
    x_tenant_id: TenantHeader, x_user_id: UserHeader, x_locale: LocaleHeader = None
) -> Caller:
    """The ``Caller`` of every ``/v1`` handler, from the trusted headers. The user id is
    encoded here, once (``domain.threads.stored_user_id``): every layer below sees only its
    stored form."""
    return Caller(tenant_id=x_tenant_id, user_id=_stored_user(x_user_id), locale=x_locale)


def _stored_user(header: str, key: str = USER_HEADER, source: str = "header") -> str:
    """A user id as sent (a header arrives as bytes read as Latin-1: read as UTF-8 where it
    is) → its stored form; a refused id is a 422 saying what a user id may be."""
    value = header_text(header) if source == "header" else header
    try:
        return stored_user_id(value)
    except ValueError as exc:
        raise invalid(key, source, str(exc)) from None


SERVICE_STATE = "threadkeeper_service"
"""Where the app's state holds the ``ThreadService`` (for hooks that run before the route's
dependencies are resolved)."""


def strict_json_body(body_type: type[Any]) -> BeforeRequestHookHandler:
    """A ``before_request`` hook decoding the body strictly as ``body_type``.

    Litestar converts bodies in lax mode (``"1"`` would pass for ``1``); the contract wants
    every wrongly typed field refused (422), and a body that is not JSON at all is 400.
    """
    decoder = msgspec.json.Decoder(body_type)

    async def check(request: Request[Any, Any, Any]) -> None:
        try:
            body = await request.body()
        except HTTPException as exc:
            if exc.status_code == 413:  # over the body limit: a run refused, counted as one
                service: ThreadService = request.app.state[SERVICE_STATE]
                deltas = choose_representation(request.headers.get("accept")) != JSON
                service.count_refused(413, "message-too-large", deltas=deltas)
            raise
        earlier = earlier_problems(request)  # the headers', path's and query's
        if (broken := invalid_utf8_at(body)) is not None:  # msgspec counts within a string
            raise ClientException(f"The body is not JSON: invalid UTF-8 at byte {broken}")
        try:
            decoder.decode(body)
        except msgspec.ValidationError as exc:
            try:  # the typed decoder may refuse a value before it sees the JSON is broken
                found = body_problems(msgspec.json.decode(body), body_type)
            except msgspec.DecodeError as broken:
                raise ClientException(f"The body is not JSON: {broken}") from broken
            raise refuse(earlier + (found or body_errors(exc))) from exc
        except msgspec.DecodeError as exc:
            raise ClientException(f"The body is not JSON: {exc}") from exc
        if earlier:
            raise refuse(earlier)

    return check


def _exact(value: str, pattern: str, key: str, source: str) -> str:
    if not exact(pattern, value):
        raise invalid(key, source, f"Expected `str` matching regex {pattern!r}")
    return value


def _thread_id(value: str) -> str:
    return _exact(value, THREAD_ID_PATTERN, "thread_id", "path")


def _run_id(value: str, source: str = "path") -> str:
    """The canonical (lower-case) form, so a retry matches however the client spelled it."""
    return str(uuid.UUID(_exact(value, UUID_PATTERN, "run_id", source)))


def _single_integer(request: Request[Any, Any, Any], key: str) -> None:
    """Litestar reads ``1e2`` or ``2.0`` as an integer and takes one of several values: the
    contract wants a query integer written as digits, once."""
    values = request.query_params.getall(key, [])
    if len(values) > 1:
        raise invalid(key, "query", f"Expected one value, got {len(values)}")
    if values and not (values[0].isascii() and values[0].isdigit()):
        raise invalid(key, "query", "Expected an integer written as digits")


def _own_user(caller: Caller, user_id: str) -> None:
    """The path's ``user_id`` names the caller: as sent in ``X-User-Id``, or — for an id a
    path cannot carry (a ``/``, ``.`` or ``..``) — as the caller's own stored form
    (``~`` + SHA-256 hex), which names nobody else."""
    if user_id == caller.user_id and HASHED_USER_ID.fullmatch(user_id):
        return
    if _stored_user(user_id, "user_id", "path") != caller.user_id:
        raise http_problem(403, "The path's user_id must equal X-User-Id.")


# --- threads --------------------------------------------------------------------------------


@post(
    "/threads/{thread_id:str}/runs",
    status_code=200,
    before_request=strict_json_body(RunBody),
    operation_class=RunOperation,
    responses={
        200: ResponseSpec(
            data_container=RunResultOut, description="The run.", generate_examples=False
        ),
        **problems(400, 401, 403, 406, 409, 413, 422, 429, 500, 502, 503, 504),
    },
)
async def start_run(
    request: Request[Any, Any, Any],
    service: Service,
    caller: CallerDep,
    run_rate_limit: RunRateLimitDep,
    sse_heartbeat: SseHeartbeatDep,
    thread_id: ThreadIdPath,
    data: JSONBody[RunBody],
) -> Response[Any]:
    """One run: one user message in, one answer out (SSE unless Accept prefers JSON).

    Unknown threads are created. A completed ``run_id`` returns its stored body, no new run.
    Over ``THREADKEEPER_RATE_LIMIT_PER_MINUTE`` runs of the user in a minute → 429.
    """
    _thread_id(thread_id)
    representation = choose_representation(request.headers.get("accept"))
    if representation is None:
        raise http_problem(406, "This endpoint produces text/event-stream or application/json.")
    try:  # the size rule, before the rate limit: an oversized message costs no run
        message = RunMessage(content=data.message.content, id=data.message.id)
    except MessageTooLong:
        service.count_refused(413, "message-too-large", deltas=representation != JSON)
        raise
    run_request = RunRequest(
        message=message,
        run_id=_run_id(data.run_id, "body") if data.run_id is not None else None,
        deltas=representation != JSON,
    )
    if run_rate_limit is not None:
        await run_rate_limit.check(caller)  # after validation: only valid requests count
    handle = await service.start_run(caller, thread_id, run_request)
    if representation == JSON:
        return Response(await handle.result(), media_type=JSON, status_code=200)
    return (await EventRelay.start(handle.batches(), sse_heartbeat)).response()


@get(
    "/threads/{thread_id:str}/messages",
    operation_class=ContractOperation,
    responses=problems(401, 403, 404, 422, 500, 503),
)
async def list_messages(
    request: Request[Any, Any, Any],
    service: Service,
    caller: CallerDep,
    thread_id: ThreadIdPath,
    limit: LimitQuery = 20,
    before: BeforeQuery = None,
) -> MessagesPageOut:
    """A page of the transcript, oldest→newest: human messages and non-empty AI answers."""
    _thread_id(thread_id)
    _single_integer(request, "limit")
    if before is not None:
        _exact(before, THREAD_ID_PATTERN, "before", "query")
    page = await service.messages(caller, thread_id, limit=limit, before=before)
    return MessagesPageOut([message_out(m) for m in page.messages], page.next_before)


@get(
    "/threads/{thread_id:str}/storage",
    operation_class=ContractOperation,
    responses=problems(401, 403, 404, 422, 500, 503),
)
async def thread_storage(
    service: Service, caller: CallerDep, thread_id: ThreadIdPath
) -> ThreadStorageOut:
    """The bytes the thread keeps, by kind — checkpoints, messages, run records, archive,
    tool audit, feedback — and their total (not the user's memory, which is per user), as
    stored (compressed where threadkeeper compresses) and logical (inflated). 404
    for a thread that does not exist, as for one of another user."""
    usage = await service.storage(caller, _thread_id(thread_id))
    logical = usage.uncompressed
    return ThreadStorageOut(
        thread_id=thread_id,
        bytes=StorageBytesOut(**usage.by_kind()),
        total=usage.total,
        logical_bytes=StorageBytesOut(**logical.by_kind()),
        logical_total=logical.total,
    )


@delete(
    "/threads/{thread_id:str}",
    status_code=204,
    operation_class=ContractOperation,
    responses=problems(401, 403, 409, 422, 500, 503),
)
async def delete_thread(service: Service, caller: CallerDep, thread_id: ThreadIdPath) -> None:
    """Delete the thread with its checkpoints, archive, run records and feedback (not the
    user's memory); 204 also when it is already gone. A run in flight on the thread finishes
    first (the deletion waits up to 30 s for it, then answers 409 naming it)."""
    await service.delete_thread(caller, _thread_id(thread_id))


@post(
    "/threads/{thread_id:str}/runs/{run_id:str}/feedback",
    status_code=204,
    before_request=strict_json_body(FeedbackBody),
    operation_class=ContractOperation,
    responses=problems(400, 401, 403, 404, 422, 500, 503),
)
async def add_feedback(
    service: Service,
    caller: CallerDep,
    thread_id: ThreadIdPath,
    run_id: RunIdPath,
    data: JSONBody[FeedbackBody],
) -> None:
    """Thumbs up (1) or down (-1) on a completed run, with an optional comment."""
    await service.add_feedback(
        caller, _thread_id(thread_id), _run_id(run_id), data.score, data.comment
    )


# --- users ----------------------------------------------------------------------------------


@get(
    "/users/{user_id:str}/memory",
    operation_class=ContractOperation,
    responses=problems(401, 403, 422, 500, 503),
)
async def get_memory(service: Service, caller: CallerDep, user_id: UserIdPath) -> MemoryOut:
    """What is remembered about the user in this tenant, with provenance."""
    _own_user(caller, user_id)
    return memory_out(await service.memory(caller))


@delete(
    "/users/{user_id:str}/memory",
    status_code=200,
    operation_class=ContractOperation,
    responses=problems(401, 403, 422, 500, 503),
)
async def reset_memory(service: Service, caller: CallerDep, user_id: UserIdPath) -> MemoryResetOut:
    """Forget the user's profile and facts in this tenant; the count deleted."""
    _own_user(caller, user_id)
    return MemoryResetOut(memory_items=await service.reset_memory(caller))


@delete(
    "/users/{user_id:str}",
    status_code=200,
    operation_class=ContractOperation,
    responses=problems(401, 403, 409, 422, 500, 503),
)
async def erase_user(service: Service, caller: CallerDep, user_id: UserIdPath) -> ErasureReceiptOut:
    """Erase everything of the user in this tenant; a receipt of the counts deleted and of
    what a verification pass then found left per store (0 each). Each of the user's threads is
    deleted once its run in flight, if any, has finished (409 after 30 s of waiting; erasing
    again completes what was left); the user's runs are refused (409) until the erasure ends."""
    _own_user(caller, user_id)
    receipt = await service.erase_user(caller)
    return ErasureReceiptOut(
        threads=receipt.threads,
        messages=receipt.messages,
        memory_items=receipt.memory_items,
        feedback=receipt.feedback,
        remaining=receipt.remaining,
    )


V1_HANDLERS = [
    start_run,
    list_messages,
    thread_storage,
    delete_thread,
    add_feedback,
    get_memory,
    reset_memory,
    erase_user,
]
