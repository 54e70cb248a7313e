"""A load driver for a real threadkeeper server over HTTP, and the check that what the clients
were answered is what the service stored.

``drive`` sends ``turns`` messages on each of ``threads`` threads, one at a time per thread and
all threads at once (each thread is one client: it sends its next message when the previous
one was answered), in JSON or SSE mode, and records every outcome. ``verify`` then reads each
thread's transcript (``GET /messages``, every page) and compares it with the outcomes:

- every acknowledged round (200 / ``end``) is in the transcript, exactly once, in order, with
  the answer the client was given;
- no round answered with an error (or refused: 409, 503 …) is in it;
- nothing else is.

A round whose outcome the client could not learn (the connection broke mid-answer) may be in
the transcript or not, but at most once; ``verify`` reports how many there were.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import statistics
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

Mode = Literal["json", "sse"]


@dataclass
class Outcome:
    thread: str
    turn: int
    content: str
    run_id: str
    status: int | None = None
    """HTTP status of the response (None: no response at all)."""
    kind: Literal["ok", "error", "refused", "unknown"] = "unknown"
    """ok: acknowledged; error: an error answer (``error`` event or 5xx); refused: 4xx/503
    before the run started; unknown: the client could not learn the outcome."""
    answer: str | None = None
    problem: dict[str, Any] | None = None
    seconds: float = 0.0
    first_token: float | None = None
    """Seconds from the request to the first ``messages`` event (SSE only)."""


@dataclass
class LoadReport:
    outcomes: list[Outcome]
    seconds: float

    def count(self, kind: str) -> int:
        return sum(1 for o in self.outcomes if o.kind == kind)

    def latencies(self) -> list[float]:
        return sorted(o.seconds for o in self.outcomes if o.kind == "ok")

    def summary(self) -> dict[str, Any]:
        ok = self.latencies()
        firsts = sorted(o.first_token for o in self.outcomes if o.first_token is not None)

        def pct(values: Sequence[float], q: float) -> float | None:
            if not values:
                return None
            return round(values[min(len(values) - 1, int(q * len(values)))] * 1000, 1)

        problems: dict[str, int] = {}
        for o in self.outcomes:
            if o.kind != "ok":
                slug = (o.problem or {}).get("type", f"status {o.status}")
                problems[str(slug)] = problems.get(str(slug), 0) + 1
        return {
            "runs": len(self.outcomes),
            "ok": self.count("ok"),
            "errors": self.count("error"),
            "refused": self.count("refused"),
            "unknown": self.count("unknown"),
            "problems": problems,
            "seconds": round(self.seconds, 2),
            "runs_per_second": round(self.count("ok") / self.seconds, 2) if self.seconds else 0,
            "p50_ms": pct(ok, 0.50),
            "p95_ms": pct(ok, 0.95),
            "p99_ms": pct(ok, 0.99),
            "mean_ms": round(statistics.fmean(ok) * 1000, 1) if ok else None,
            "first_token_p50_ms": pct(firsts, 0.50),
            "first_token_p95_ms": pct(firsts, 0.95),
        }


def question(thread: str, turn: int) -> str:
    """A distinct, recognisable question per round (so a transcript can be matched)."""
    topics = (
        "Is dental treatment covered by my health insurance?",
        "How do I file a claim?",
        "What does maternity cover include?",
        "Can I add my spouse to the policy?",
        "What is the waiting period for surgery?",
    )
    return f"{topics[turn % len(topics)]} (ref {thread}/{turn})"


def _problem(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        return {"type": f"status {response.status_code}", "detail": response.text[:200]}
    return body if isinstance(body, dict) else {"detail": body}


async def one_run(
    client: httpx.AsyncClient, outcome: Outcome, mode: Mode, *, request_timeout: float = 300
) -> Outcome:
    body = {"message": {"content": outcome.content}, "run_id": outcome.run_id}
    url = f"/v1/threads/{outcome.thread}/runs"
    start = time.monotonic()
    try:
        if mode == "json":
            response = await client.post(
                url, json=body, headers={"Accept": "application/json"}, timeout=request_timeout
            )
            outcome.status = response.status_code
            if response.status_code == 200:
                outcome.kind, outcome.answer = "ok", response.json()["message"]["content"]
            else:
                outcome.problem = _problem(response)
                outcome.kind = "error" if response.status_code >= 500 else "refused"
                if response.status_code in (503, 429):
                    outcome.kind = "refused" if _refused_before_run(outcome.problem) else "error"
        else:
            await _sse_run(client, url, body, outcome, start, request_timeout)
    except (TimeoutError, httpx.HTTPError) as exc:
        outcome.kind = "unknown"
        outcome.problem = {"type": type(exc).__name__, "detail": str(exc)[:200]}
    outcome.seconds = time.monotonic() - start
    return outcome


def _refused_before_run(problem: dict[str, Any]) -> bool:
    return str(problem.get("type", "")).endswith(("at-capacity", "rate-limited", "unavailable"))


async def _sse_run(
    client: httpx.AsyncClient,
    url: str,
    body: dict[str, Any],
    outcome: Outcome,
    start: float,
    request_timeout: float,
) -> None:
    async with client.stream(
        "POST", url, json=body, headers={"Accept": "text/event-stream"}, timeout=request_timeout
    ) as response:
        outcome.status = response.status_code
        if response.status_code != 200:
            await response.aread()
            outcome.problem = _problem(response)
            outcome.kind = "error" if response.status_code >= 500 else "refused"
            if response.status_code == 503 and _refused_before_run(outcome.problem):
                outcome.kind = "refused"
            return
        name, data = "message", []
        async for line in response.aiter_lines():
            if line.startswith(":"):
                continue  # a keep-alive comment
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data.append(line[5:].strip())
            elif not line and data:
                payload = json.loads("\n".join(data))
                data = []
                if name == "messages" and outcome.first_token is None:
                    outcome.first_token = time.monotonic() - start
                if name == "end":
                    outcome.kind, outcome.answer = "ok", payload["message"]["content"]
                    return
                if name == "error":
                    outcome.kind, outcome.problem = "error", payload
                    return
    outcome.kind = "unknown"  # the stream ended without `end` or `error`


async def drive(
    base_url: str,
    headers: dict[str, str],
    *,
    threads: int,
    turns: int,
    mode: Mode = "json",
    prefix: str | None = None,
    request_timeout: float = 300,
) -> LoadReport:
    """``threads`` clients at once, each sending ``turns`` messages in order on its thread."""
    prefix = prefix or f"load-{uuid.uuid4().hex[:6]}"
    limits = httpx.Limits(max_connections=threads + 10, max_keepalive_connections=threads + 10)
    outcomes: list[Outcome] = []
    async with httpx.AsyncClient(base_url=base_url, headers=headers, limits=limits) as client:

        async def conversation(index: int) -> None:
            thread = f"{prefix}-{index}"
            for turn in range(turns):
                outcome = Outcome(thread, turn, question(thread, turn), str(uuid.uuid4()))
                outcomes.append(
                    await one_run(client, outcome, mode, request_timeout=request_timeout)
                )

        start = time.monotonic()
        await asyncio.gather(*(conversation(i) for i in range(threads)))
        seconds = time.monotonic() - start
    return LoadReport(outcomes, seconds)


@dataclass
class Verification:
    threads: int = 0
    acknowledged: int = 0
    lost: list[str] = field(default_factory=list)
    """Acknowledged rounds missing from the transcript (or with another answer)."""
    stored_but_refused: list[str] = field(default_factory=list)
    """Rounds answered with an error (or refused) that are in the transcript anyway."""
    duplicated: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    """Human messages in a transcript that no client sent."""
    unknown_stored: int = 0
    unknown_absent: int = 0

    @property
    def ok(self) -> bool:
        return not (self.lost or self.stored_but_refused or self.duplicated or self.unexpected)

    def describe(self) -> str:
        return (
            f"{self.acknowledged} acknowledged over {self.threads} threads; lost "
            f"{len(self.lost)} {self.lost[:3]}; stored though refused "
            f"{len(self.stored_but_refused)} {self.stored_but_refused[:3]}; duplicated "
            f"{len(self.duplicated)}; unexpected {len(self.unexpected)}; unknown outcome "
            f"{self.unknown_stored} stored / {self.unknown_absent} not"
        )


async def transcript(client: httpx.AsyncClient, thread: str) -> list[dict[str, Any]] | None:
    """Every message of the thread, oldest first (None: the thread does not exist)."""
    messages: list[dict[str, Any]] = []
    before: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 100}
        if before:
            params["before"] = before
        response = await client.get(f"/v1/threads/{thread}/messages", params=params)
        if response.status_code == 404 and not messages:
            return None
        response.raise_for_status()
        page = response.json()
        messages = page["messages"] + messages
        before = page["next_before"]
        if not before:
            return messages


async def verify(
    base_url: str, headers: dict[str, str], outcomes: Sequence[Outcome]
) -> Verification:
    """Compare every thread's transcript with what its client was answered."""
    result = Verification()
    by_thread: dict[str, list[Outcome]] = {}
    for outcome in outcomes:
        by_thread.setdefault(outcome.thread, []).append(outcome)
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as client:
        for thread, sent in by_thread.items():
            result.threads += 1
            messages = await transcript(client, thread) or []
            humans = [m for m in messages if m["role"] == "human"]
            seen: dict[str, int] = {}
            for m in humans:
                seen[m["content"]] = seen.get(m["content"], 0) + 1
            sent_contents = {o.content for o in sent}
            result.unexpected += [c for c in seen if c not in sent_contents]
            result.duplicated += [c for c, n in seen.items() if n > 1]
            answers = _answers(messages)
            for outcome in sent:
                stored = seen.get(outcome.content, 0) > 0
                label = f"{thread}/{outcome.turn}"
                if outcome.kind == "ok":
                    result.acknowledged += 1
                    if not stored or answers.get(outcome.content) != outcome.answer:
                        result.lost.append(label)
                elif outcome.kind == "unknown":
                    if stored:
                        result.unknown_stored += 1
                    else:
                        result.unknown_absent += 1
                elif stored:
                    result.stored_but_refused.append(label)
    return result


def _answers(messages: Sequence[dict[str, Any]]) -> dict[str, str]:
    """Human content → the AI answer that follows it."""
    out: dict[str, str] = {}
    for current, following in itertools.pairwise(messages):
        if current["role"] == "human" and following["role"] == "ai":
            out[current["content"]] = following["content"]
    return out


async def send(c: httpx.AsyncClient, thread: str, content: str) -> httpx.Response:
    """A run answered as JSON (200 once its round is stored)."""
    return await c.post(
        f"/v1/threads/{thread}/runs",
        json={"message": {"content": content}},
        headers={"Accept": "application/json"},
    )
