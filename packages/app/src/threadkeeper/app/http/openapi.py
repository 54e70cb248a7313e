"""OpenAPI details Litestar cannot infer: problem responses, the run's two media types and its
events, optional parameters that are absent rather than null, closed request bodies, the bearer
scheme. What the schema says is what schemathesis will hold the API to."""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import msgspec
from litestar.openapi import OpenAPIConfig, ResponseSpec
from litestar.openapi.plugins import JsonRenderPlugin, OpenAPIRenderPlugin, YamlRenderPlugin
from litestar.openapi.spec import (
    Components,
    OpenAPIHeader,
    OpenAPIMediaType,
    OpenAPIResponse,
    OpenAPIType,
    Operation,
    Parameter,
    Reference,
    Schema,
    SecurityScheme,
)
from litestar.plugins import OpenAPISchemaPlugin

from threadkeeper.app.http.auth import BEARER_SCHEME
from threadkeeper.app.http.negotiation import JSON, SSE
from threadkeeper.app.http.problems import PROBLEM_MEDIA_TYPE
from threadkeeper.app.http.schemas import Problem

if TYPE_CHECKING:
    from litestar._openapi.schema_generation import SchemaCreator
    from litestar.connection import Request
    from litestar.typing import FieldDefinition

PROBLEM_DESCRIPTIONS = {
    400: "The body is not JSON at all.",
    401: "Missing or wrong service token.",
    403: "The token may not act for this tenant, or the path's user is not X-User-Id.",
    404: "No such thread, message or run.",
    406: "Accept allows neither text/event-stream nor application/json.",
    409: (
        "A run is in flight on the thread (`running_run_id`; absent: it is ending, retry), the "
        "message id is taken, the run_id completed here with another request "
        "(`idempotency-mismatch`, `field`), or the run lost its claim on the thread "
        "(`claim-lost`: nothing stored)."
    ),
    413: "The message is over 32 KiB of UTF-8 or alone over the token budget.",
    422: "An invalid header, path or query parameter, or body field (`errors`).",
    429: (
        "Over THREADKEEPER_RATE_LIMIT_PER_MINUTE runs of this user in the last minute; "
        "`Retry-After` says when to try again."
    ),
    500: "The run failed (the thread is unchanged), or an unexpected error.",
    502: "The model did not answer after its retries and fallback (the thread is unchanged).",
    503: (
        "A storage backend is unavailable, the replica is at capacity or shutting down, the "
        "outcome of a commit is unknown (`commit-in-doubt`: retry with the same run_id), or "
        "not ready (`checks`)."
    ),
    504: "The run passed THREADKEEPER_RUN_TIMEOUT_SECONDS (the thread is unchanged).",
}

SSE_DESCRIPTION = (
    "One Server-Sent Event, its `data` JSON text. In order: `metadata` {run_id, thread_id}; "
    "any of `messages` {id, delta} and `custom` {stage, ...}; last `end` (the JSON-mode body) "
    "or `error` (a problem body), after which the stream closes. A `custom` "
    '{"stage": "model", "status": "retry"} means the deltas so far belong to a model call '
    "that failed and is being retried. While there is nothing to send, a comment line "
    "(`: keep-alive`) every THREADKEEPER_SSE_HEARTBEAT_SECONDS."
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


def _object(required: list[str], properties: dict[str, Schema | Reference]) -> Schema:
    return Schema(type=OpenAPIType.OBJECT, required=required, properties=properties)


def _component(name: str) -> Reference:
    return Reference(ref=f"#/components/schemas/{name}")


RUN_EVENT_DATA: dict[str, Schema | Reference] = {
    "metadata": _object(
        ["run_id", "thread_id"],
        {"run_id": Schema(type=OpenAPIType.STRING), "thread_id": Schema(type=OpenAPIType.STRING)},
    ),
    "messages": _object(
        ["id", "delta"],
        {
            "id": Schema(type=OpenAPIType.STRING, description="The AI message being written."),
            "delta": Schema(
                type=OpenAPIType.STRING, min_length=1, description="The next piece of its text."
            ),
        },
    ),
    "custom": _object(
        ["stage"],
        {
            "stage": Schema(type=OpenAPIType.STRING, description="`retrieval`, `tool` or `model`."),
            "status": Schema(type=OpenAPIType.STRING, enum=["start", "end", "retry"]),
            "name": Schema(type=OpenAPIType.STRING, description="The tool (stage `tool`)."),
            "error": Schema(
                type=OpenAPIType.STRING,
                description="Stage `model`, status `retry`: the failed call's error type.",
            ),
        },
    ),
    "end": _component("RunResultOut"),
    "error": _component("Problem"),
}
"""The JSON in each event's ``data``, by event name (DESIGN "HTTP contract")."""


def run_event_schema() -> Schema:
    """One event of a run's stream, as schemathesis parses it (``event``, ``data``, and ``id``
    or ``retry`` if sent): OpenAPI 3.1 has no ``itemSchema`` (3.2), and schemathesis reads a
    3.0/3.1 ``text/event-stream`` ``schema`` as the schema of each event. ``data`` is JSON
    text; ``contentMediaType`` + ``contentSchema`` describe what it decodes to."""
    return Schema(
        type=OpenAPIType.OBJECT,
        description=SSE_DESCRIPTION,
        required=["event", "data"],
        properties={
            "event": Schema(type=OpenAPIType.STRING, enum=list(RUN_EVENT_DATA)),
            "data": Schema(type=OpenAPIType.STRING, content_media_type=JSON),
        },
        one_of=[
            Schema(
                properties={
                    "event": Schema(const=event),
                    "data": Schema(content_media_type=JSON, content_schema=data),
                }
            )
            for event, data in RUN_EVENT_DATA.items()
        ],
    )


def _absent_not_null(parameter: Parameter | Reference) -> None:
    """An optional header or query parameter is absent or a value, never null: a header or a
    query string can only carry the text ``null``, which is refused (422). Litestar documents
    ``str | None`` as ``oneOf: [string, null]`` beside the constraints; keep the string."""
    if not isinstance(parameter, Parameter) or parameter.required:
        return
    schema = parameter.schema
    if not isinstance(schema, Schema) or not schema.one_of:
        return
    branches = [s for s in schema.one_of if isinstance(s, Schema)]
    types = [s.type for s in branches]
    # only `[{type: …}, {type: null}]`: any more in a branch would be lost
    if (
        len(schema.one_of) == 2
        and types.count(OpenAPIType.NULL) == 1
        and branches == [Schema(type=t) for t in types]
    ):
        schema.one_of = None
        schema.type = next(t for t in types if t != OpenAPIType.NULL)


@dataclass
class ContractOperation(Operation):
    """Drops the 400 Litestar adds for validation: validation failures are 422 here, and a 400
    happens only where a JSON body is read. Optional parameters are not nullable."""

    def __post_init__(self) -> None:
        if self.request_body is None and self.responses:
            self.responses.pop("400", None)
        for parameter in self.parameters or []:
            _absent_not_null(parameter)


@dataclass
class RunOperation(ContractOperation):
    """``POST …/runs`` answers 200 as SSE or JSON, chosen by ``Accept``; its 429 carries
    ``Retry-After``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        ok = (self.responses or {}).get("200")
        if isinstance(ok, OpenAPIResponse):
            ok.description = "The run: SSE unless Accept's best match is application/json."
            ok.content = {
                SSE: OpenAPIMediaType(schema=run_event_schema()),
                **(ok.content or {}),
            }
        limited = (self.responses or {}).get("429")
        if isinstance(limited, OpenAPIResponse):
            limited.headers = {
                "Retry-After": OpenAPIHeader(
                    schema=Schema(type=OpenAPIType.INTEGER, minimum=1),
                    required=True,
                    description="Seconds until the user may start another run.",
                )
            }


class ClosedStructSchemaPlugin(OpenAPISchemaPlugin):
    """A msgspec Struct with ``forbid_unknown_fields=True`` (the request bodies) refuses unknown
    members (422), so its schema says ``additionalProperties: false``. The next plugin for the
    type (Litestar's own Struct plugin) builds the schema; this one must come before it."""

    def is_plugin_supported_field(self, field_definition: FieldDefinition) -> bool:
        return (
            not field_definition.is_union
            and field_definition.is_subclass_of(msgspec.Struct)
            and field_definition.type_.__struct_config__.forbid_unknown_fields
        )

    def to_openapi_schema(
        self, field_definition: FieldDefinition, schema_creator: SchemaCreator
    ) -> Schema:
        builder = next(
            plugin
            for plugin in schema_creator.plugins
            if not isinstance(plugin, ClosedStructSchemaPlugin)
            and schema_creator.plugin_supports_field(plugin, field_definition)
        )
        schema = builder.to_openapi_schema(field_definition, schema_creator)
        schema.additional_properties = False
        return schema


_DOCS_STYLE = """<style>
body { font: 15px/1.45 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto;
  padding: 0 1rem; color: #1b1b1b }
code, pre { font: 13px/1.4 ui-monospace, monospace }
pre { white-space: pre-wrap; margin: .3rem 0 }
h2 { border-bottom: 1px solid #ccc; margin-top: 2.5rem }
h3 { margin: 1.8rem 0 .3rem }
table { border-collapse: collapse; margin: .4rem 0 } td, th { border: 1px solid #ddd;
  padding: .2rem .5rem; text-align: left; vertical-align: top }
.method { font-weight: bold; text-transform: uppercase }
</style>"""

_METHODS = ("get", "put", "post", "delete", "patch", "head", "options")


def _escape(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _schema_text(schema: Any) -> str:
    """A schema in a few words: its reference, type, pattern, enum, bounds."""
    if not isinstance(schema, dict):
        return ""
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return f'<a href="#schema-{_escape(name)}">{_escape(name)}</a>'
    if "oneOf" in schema or "anyOf" in schema:
        return " | ".join(_schema_text(s) for s in schema.get("oneOf") or schema["anyOf"])
    parts = [_escape(schema.get("type", ""))]
    if schema.get("type") == "array":
        parts = [f"array of {_schema_text(schema.get('items'))}"]
    for key in ("const", "enum", "pattern", "minimum", "maximum", "minLength", "maxLength"):
        if key in schema:
            parts.append(f"{key} <code>{_escape(schema[key])}</code>")
    return ", ".join(p for p in parts if p)


class DocumentationPagePlugin(OpenAPIRenderPlugin):
    """``/schema``: the OpenAPI document as one plain HTML page, rendered on the server from the
    document itself — no script, stylesheet, font or icon from anywhere else, so it works
    offline (Litestar's Redoc, Swagger, Scalar, RapiDoc and Elements pages load theirs from
    CDNs). ``/schema/openapi.json`` and ``.yaml`` are the machine-readable document."""

    def __init__(self) -> None:
        super().__init__(path="/", favicon="", style=_DOCS_STYLE)

    def render(self, request: Request[Any, Any, Any], openapi_schema: dict[str, Any]) -> bytes:
        info = openapi_schema.get("info", {})
        title = _escape(info.get("title", "API"))
        out = [
            f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title>",
            "<meta name='viewport' content='width=device-width, initial-scale=1'>",
            self.style,
            "</head><body>",
            f"<h1>{title} <small>{_escape(info.get('version', ''))}</small></h1>",
            "<p>The OpenAPI document: <a href='openapi.json'>openapi.json</a>, "
            "<a href='openapi.yaml'>openapi.yaml</a>.</p>",
            "<h2>Operations</h2>",
        ]
        for path, item in openapi_schema.get("paths", {}).items():
            for method in _METHODS:
                if method in item:
                    out.extend(self._operation(method, path, item[method]))
        out.append("<h2>Schemas</h2>")
        for name, schema in openapi_schema.get("components", {}).get("schemas", {}).items():
            out.extend(self._schema(name, schema))
        out.append("</body></html>")
        return "\n".join(out).encode("utf-8")

    @staticmethod
    def _operation(method: str, path: str, operation: dict[str, Any]) -> list[str]:
        verb, where = _escape(method.upper()), _escape(path)
        out = [
            f"<h3><span class='method'>{verb}</span> <code>{where}</code> "
            f"— {_escape(operation.get('summary', ''))}</h3>"
        ]
        if operation.get("description"):
            out.append(f"<pre>{_escape(operation['description'])}</pre>")
        parameters = operation.get("parameters") or []
        if parameters:
            out.append("<table><tr><th>parameter</th><th>in</th><th>schema</th><th></th></tr>")
            for parameter in parameters:
                required = " (required)" if parameter.get("required") else ""
                out.append(
                    f"<tr><td><code>{_escape(parameter.get('name', ''))}</code>{required}</td>"
                    f"<td>{_escape(parameter.get('in', ''))}</td>"
                    f"<td>{_schema_text(parameter.get('schema'))}</td>"
                    f"<td>{_escape(parameter.get('description', ''))}</td></tr>"
                )
            out.append("</table>")
        body = operation.get("requestBody")
        if body:
            for media, content in body.get("content", {}).items():
                out.append(
                    f"<p>Body <code>{_escape(media)}</code>: "
                    f"{_schema_text(content.get('schema'))}</p>"
                )
        out.append("<table><tr><th>status</th><th>response</th><th>media types</th></tr>")
        for status, response in (operation.get("responses") or {}).items():
            media = ", ".join(
                f"<code>{_escape(m)}</code> {_schema_text(c.get('schema'))}"
                for m, c in (response.get("content") or {}).items()
            )
            out.append(
                f"<tr><td>{_escape(status)}</td><td>{_escape(response.get('description', ''))}"
                f"</td><td>{media}</td></tr>"
            )
        out.append("</table>")
        return out

    @staticmethod
    def _schema(name: str, schema: dict[str, Any]) -> list[str]:
        out = [f"<h3 id='schema-{_escape(name)}'><code>{_escape(name)}</code></h3>"]
        if schema.get("description"):
            out.append(f"<pre>{_escape(schema['description'])}</pre>")
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        if properties:
            out.append("<table><tr><th>field</th><th>schema</th><th></th></tr>")
            for field, value in properties.items():
                mark = " (required)" if field in required else ""
                about = value.get("description", "") if isinstance(value, dict) else ""
                out.append(
                    f"<tr><td><code>{_escape(field)}</code>{mark}</td>"
                    f"<td>{_schema_text(value)}</td><td>{_escape(about)}</td></tr>"
                )
            out.append("</table>")
        return out


def openapi_config(title: str, version: str, *, bearer: bool) -> OpenAPIConfig:
    return OpenAPIConfig(
        title=title,
        version=version,
        path="/schema",
        render_plugins=[DocumentationPagePlugin(), JsonRenderPlugin(), YamlRenderPlugin()],
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
