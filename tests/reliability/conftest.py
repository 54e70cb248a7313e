"""The reliability suite: load, double sends, storage and provider faults, a state machine of
the API and raw-bytes fuzzing, against real servers (issue 9).

Two sizes. CI runs it reduced (``scripts/test`` → ``tox -e reliability``), with generous time
limits: a busy machine must still pass, so tests assert order and outcome, never speed.
``tox -e reliability-full`` runs it at full size (``THREADKEEPER_RELIABILITY_SIZE=full``) and
records every measurement (the ``measure`` fixture) into
``THREADKEEPER_RELIABILITY_RESULTS`` (JSON lines); ``tests/reliability/report.py`` turns
those into ``docs/reliability.md``'s tables.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.api.conftest import (  # noqa: F401 (the API suite's fixtures, per profile)
    auth,
    database,
    make_app,
    profile,
    redis_stack,
)

SIZE = os.environ.get("THREADKEEPER_RELIABILITY_SIZE", "reduced")
FULL = SIZE == "full"
RESULTS = os.environ.get("THREADKEEPER_RELIABILITY_RESULTS")


def sized(reduced: int, full: int) -> int:
    """``reduced`` in CI, ``full`` in ``tox -e reliability-full``."""
    return full if FULL else reduced


Measure = Callable[..., None]


@pytest.fixture
def measure(request: pytest.FixtureRequest) -> Iterator[Measure]:
    """``measure(kind, **figures)``: one line of the report (kept only when
    ``THREADKEEPER_RELIABILITY_RESULTS`` names a file). Figures are reported, never gated."""
    lines: list[dict[str, Any]] = []

    def record(kind: str, **figures: Any) -> None:
        lines.append(
            {"test": request.node.nodeid, "kind": kind, "size": SIZE, "at": time.time(), **figures}
        )

    yield record
    if RESULTS and lines:
        path = Path(RESULTS)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as out:
            for line in lines:
                out.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
