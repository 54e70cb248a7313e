"""Process-wide test setup: threadkeeper's metrics with an in-memory reader
(``tests.support.metrics``), installed before any app is built; and the identity caches'
mutation check on (``domain.caches.check_mutations``): a message a cache remembered, changed in
place, fails the test that did it (``THREADKEEPER_TEST_CHECK_MUTATIONS=0`` turns it off, for
a benchmark-like run of the suites)."""

from __future__ import annotations

import os

import pytest

from tests.support import metrics
from threadkeeper.domain import caches


def pytest_configure(config: pytest.Config) -> None:
    metrics.install()
    caches.check_mutations(os.environ.get("THREADKEEPER_TEST_CHECK_MUTATIONS", "1") != "0")
