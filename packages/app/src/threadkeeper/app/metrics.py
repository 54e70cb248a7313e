"""threadkeeper's metrics: OpenTelemetry instruments on the process's ``MeterProvider``.

One stack for traces and metrics (``threadkeeper.app.telemetry.configure_telemetry`` installs
the providers): ``GET /metrics`` is OpenTelemetry's Prometheus reader over this provider, and
the same provider exports over OTLP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set. The
instruments are made here once, on the API's proxy meter, so they record into whichever
provider is installed (none: no-ops).

Two families (docs/operations.md lists every one with its Prometheus name and queries):

- the client-side GenAI metrics of each model call (semantic conventions
  ``telemetry.SEMCONV_VERSION``): ``gen_ai.client.token.usage``,
  ``gen_ai.client.operation.duration``, ``gen_ai.client.operation.time_to_first_chunk``;
- threadkeeper's own: runs, refusals, run duration and time to first token (the service's,
  not a model server's), lock wait, tokens before and after trimming, summary folds,
  compactions, cold starts, memory facts, retention deletions and erasures, bytes per round.

No label carries a thread, user or tenant id, nor anything else a request chooses: label
values are profiles, statuses (``RunStatus`` or a problem's slug), status codes, modes
(``json``/``sse``), reasons and kinds (enumerations), outcomes and stages (literals here and in
the runs), exception type names, and the model names of the configuration (or as the configured
provider reports the model it served). The ASGI instrumentation's HTTP server metrics keep only
``telemetry.HTTP_METRIC_ATTRIBUTES`` (a view of the ``MeterProvider``).
"""

from __future__ import annotations

from collections.abc import Mapping

from opentelemetry import metrics

METER_NAME = "threadkeeper"

_SECONDS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120]
"""Run and model-call durations: a fake model answers in milliseconds, a real one in seconds."""
_TOKENS = [16, 64, 256, 1024, 4096, 8192, 16384, 65536, 262144, 1048576, 4194304]
"""The GenAI conventions' advised buckets for token counts (powers of four)."""
_BYTES = [256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304]

_meter = metrics.get_meter(METER_NAME)

# -- GenAI client metrics (semantic conventions 1.44.0) -------------------------------------

GEN_AI_TOKEN_USAGE = _meter.create_histogram(
    "gen_ai.client.token.usage",
    unit="{token}",
    description="Tokens used by a model call, by gen_ai.token.type (input, output).",
    explicit_bucket_boundaries_advisory=_TOKENS,
)
GEN_AI_OPERATION_DURATION = _meter.create_histogram(
    "gen_ai.client.operation.duration",
    unit="s",
    description="Duration of a model call, as the client saw it.",
    explicit_bucket_boundaries_advisory=_SECONDS,
)
GEN_AI_TIME_TO_FIRST_CHUNK = _meter.create_histogram(
    "gen_ai.client.operation.time_to_first_chunk",
    unit="s",
    description="Time from a streamed model call's start to its first chunk.",
    explicit_bucket_boundaries_advisory=_SECONDS,
)

# -- runs -----------------------------------------------------------------------------------

RUNS = _meter.create_counter(
    "threadkeeper.runs",
    unit="{run}",
    description="Runs asked for, by how they ended: status is the stored outcome's status "
    "(answered, clarifying, escalate) or the problem's slug (thread-busy, rate-limited, "
    "run-timeout, unavailable, ...), or cancelled (499: the client left before the end); "
    "http.response.status_code is the answer's code (an SSE run's error event carries it).",
)
RUN_DURATION = _meter.create_histogram(
    "threadkeeper.run.duration",
    unit="s",
    description="From a run's admission to its outcome (stored, or failed), by status.",
    explicit_bucket_boundaries_advisory=_SECONDS,
)
TIME_TO_FIRST_TOKEN = _meter.create_histogram(
    "threadkeeper.run.time_to_first_token",
    unit="s",
    description="From a streamed run's admission to its first answer delta.",
    explicit_bucket_boundaries_advisory=_SECONDS,
)
LOCK_WAIT = _meter.create_histogram(
    "threadkeeper.lock.wait",
    unit="s",
    description="Time to take (or be refused) the thread's run lock, by outcome.",
    explicit_bucket_boundaries_advisory=[
        0.0005,
        0.001,
        0.0025,
        0.005,
        0.01,
        0.025,
        0.05,
        0.1,
        0.25,
        0.5,
        1,
        5,
    ],
)
WINDOW_TOKENS = _meter.create_histogram(
    "threadkeeper.window.tokens",
    unit="{token}",
    description="Tokens of a model call's context, by stage: before_trim (system prompt, "
    "summary and every message the summary does not cover) and after_trim (what was sent).",
    explicit_bucket_boundaries_advisory=_TOKENS,
)
SUMMARY_FOLDS = _meter.create_counter(
    "threadkeeper.summary.folds",
    unit="{fold}",
    description="Older turns folded into a thread's rolling summary, in stored runs, by fold: "
    "in_run (a fold the run made and waited for) or ahead (a fold made after an earlier "
    "round by follow-up work, taken by the run).",
)
COMPACTIONS = _meter.create_counter(
    "threadkeeper.compactions",
    unit="{compaction}",
    description="Destructive compactions of a thread's checkpointed history, in stored runs.",
)
COLD_STARTS = _meter.create_counter(
    "threadkeeper.cold_starts",
    unit="{run}",
    description="Runs whose thread was restored from the archive (its checkpoints had expired).",
)
ROUND_BYTES = _meter.create_histogram(
    "threadkeeper.round.bytes",
    unit="By",
    description="Bytes a stored round wrote, by kind (checkpoints, messages, run_records, ...).",
    explicit_bucket_boundaries_advisory=_BYTES,
)

THREAD_BYTES = _meter.create_histogram(
    "threadkeeper.thread.bytes",
    unit="By",
    description="After each stored round, the bytes its thread keeps, by kind (the figures of "
    "GET /v1/threads/{thread_id}/storage).",
    explicit_bucket_boundaries_advisory=[
        4096,
        16384,
        65536,
        262144,
        1048576,
        4194304,
        16777216,
        67108864,
    ],
)

# -- memory and deletion --------------------------------------------------------------------

MEMORY_FACTS = _meter.create_counter(
    "threadkeeper.memory.facts",
    unit="{fact}",
    description="Memory entries written after stored rounds, by kind.",
)
MEMORY_REFUSALS = _meter.create_counter(
    "threadkeeper.memory.refusals",
    unit="{fact}",
    description="Memory candidates refused by MemoryRules, by reason (values are never "
    "stored or logged).",
)
FOLLOWUPS = _meter.create_counter(
    "threadkeeper.followups",
    unit="{item}",
    description="Follow-up work of stored rounds that ended an attempt, by kind (memory: "
    "extraction and write; summary: a fold ahead of the thread's next run) and outcome: "
    "done; retried (the attempt failed, due again after a backoff); given_up (failed its last "
    "attempt: kept, never retried); dropped (nothing to do: its thread or user was deleted "
    "first, its record is gone, or an earlier fold covers it); released (handed back untried "
    "at shutdown).",
)
FOLLOWUPS_PENDING = _meter.create_gauge(
    "threadkeeper.followups.pending",
    unit="{item}",
    description="Follow-up work still to do (waiting, leased or being written), by kind; "
    "every replica reports the whole table, sampled every few seconds.",
)
FOLLOWUPS_GIVEN_UP = _meter.create_gauge(
    "threadkeeper.followups.given_up",
    unit="{item}",
    description="Follow-up work given up and kept, by kind (sampled as pending is).",
)
FOLLOWUPS_OLDEST_AGE = _meter.create_gauge(
    "threadkeeper.followups.oldest_age",
    unit="s",
    description="Age of the oldest follow-up work still to do (0: none).",
)
MEMORY_STALENESS = _meter.create_histogram(
    "threadkeeper.memory.staleness",
    unit="s",
    description="From a round's acknowledgement (its follow-up work recorded) to its memory "
    "written.",
    explicit_bucket_boundaries_advisory=_SECONDS,
)
DELETIONS = _meter.create_counter(
    "threadkeeper.deletions",
    unit="{thread}",
    description="Threads deleted, by reason: retention (idle past the retention period), "
    "request (DELETE of the thread) or erasure (of its user).",
)
ERASURES = _meter.create_counter(
    "threadkeeper.erasures",
    unit="{user}",
    description="Users erased (every thread, memory entry and record of the user).",
)


def metrics_exposition() -> tuple[bytes, str]:
    """``GET /metrics``: the Prometheus text of the process's registry (OpenTelemetry's
    Prometheus reader collects the provider's metrics into it, beside prometheus-client's
    process and platform collectors) and its content type."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST


def count_refusals(refused: Mapping[str, int]) -> None:
    """Add a write plan's refusal counts (``personal_data:health``, ``too_long``, …)."""
    for reason, count in refused.items():
        MEMORY_REFUSALS.add(count, {"reason": reason})


def count_memory_writes(written: Mapping[str, int], profile: str) -> None:
    """Add the memory entries a round's plan wrote, by kind."""
    for kind, count in written.items():
        if count:
            MEMORY_FACTS.add(count, {"kind": kind, "profile": profile})


def count_round_bytes(written: Mapping[str, int], profile: str) -> None:
    for kind, size in written.items():
        ROUND_BYTES.record(size, {"kind": kind, "profile": profile})


def count_run(profile: str, status: str, code: int, mode: str | None = None) -> None:
    """One run asked for, by how it ended (``RUNS``); ``mode`` ``json`` or ``sse`` once known."""
    attributes: dict[str, str | int] = {
        "profile": profile,
        "status": status,
        "http.response.status_code": code,
    }
    if mode is not None:
        attributes["mode"] = mode
    RUNS.add(1, attributes)
