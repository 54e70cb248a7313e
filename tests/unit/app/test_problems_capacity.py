"""A replica at capacity answers 503 problem+json with ``Retry-After``."""

from __future__ import annotations

from threadkeeper.app.http.problems import domain_problem
from threadkeeper.domain.errors import AtCapacity


def test_at_capacity_is_503_with_retry_after() -> None:
    problem = domain_problem(AtCapacity("32 runs are in flight on this replica; retry shortly"))
    assert problem.status_code == 503
    assert problem.type_.endswith("at-capacity")
    assert problem.headers == {"Retry-After": "1"}
    assert problem.detail == "Too many runs in flight on this replica."
