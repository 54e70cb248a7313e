"""OpenAPI details Litestar cannot infer: problem responses, the run's two media types, the
bearer scheme. What the schema says is what schemathesis will hold the API to."""

from __future__ import annotations

from dataclasses import dataclass

from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.spec import (
    Components,
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Operation,
    Schema,
    SecurityScheme,
)

from threadkeeper.app.http.auth import BEARER_SCHEME
from threadkeeper.app.http.problems import PROBLEM_MEDIA_TYPE
from threadkeeper.app.http.schemas import Problem

PROBLEM_DESCRIPTIONS = {
    400: "The body is not JSON at all.",
    401: "Missing or wrong service token.",
    403: "The token may not act for this tenant, or the path's user is not X-User-Id.",
    404: "No such thread, message or run.",
    406: "Accept allows neither text/event-stream nor application/json.",
    409: "A run is in flight on the thread (`running_run_id`), or the message id is taken.",
    413: "The message is over 32 KiB of UTF-8 or alone over the token budget.",
    422: "An invalid header, path or query parameter, or body field (`errors`).",
    500: "The run failed (the thread is unchanged), or an unexpected error.",
    503: "A storage backend is unavailable, or not ready (`checks`).",
}

SSE_DESCRIPTION = (
    "Server-Sent Events, in order: `metadata` {run_id, thread_id}; any of `messages` "
    "{id, delta} and `custom` {stage, ...}; last `end` (the JSON-mode body) or `error` "
    "(a problem body)."
)


def problems(*statuses: int) -> dict[int, ResponseSpec]:
    return {
        status: ResponseSpec(
            data_container=Problem,
            media_type=PROBLEM_MEDIA_TYPE,
            description=PROBLEM_DESCRIPTIONS[status],
            generate_examples=False,
        )
        for status in statuses
    }


@dataclass
class ContractOperation(Operation):
    """Drops the 400 Litestar adds for validation: validation failures are 422 here, and a 400
    happens only where a JSON body is read."""

    def __post_init__(self) -> None:
        if self.request_body is None and self.responses:
            self.responses.pop("400", None)


@dataclass
class RunOperation(ContractOperation):
    """``POST …/runs`` answers 200 as SSE or JSON, chosen by ``Accept``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        ok = (self.responses or {}).get("200")
        if isinstance(ok, OpenAPIResponse):
            ok.description = "The run: SSE unless Accept's best match is application/json."
            ok.content = {
                "text/event-stream": OpenAPIMediaType(
                    schema=Schema(type=OpenAPIType.STRING, description=SSE_DESCRIPTION)
                ),
                **(ok.content or {}),
            }


def openapi_config(title: str, version: str, *, bearer: bool) -> OpenAPIConfig:
    return OpenAPIConfig(
        title=title,
        version=version,
        path="/schema",
        create_examples=False,
        use_handler_docstrings=True,
        components=Components(
            security_schemes={
                BEARER_SCHEME: SecurityScheme(
                    type="http",
                    scheme="bearer",
                    description="The service token (THREADKEEPER_SERVICE_TOKEN).",
                )
            }
        )
        if bearer
        else Components(),
    )
