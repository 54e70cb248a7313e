"""Process-wide test setup: threadkeeper's metrics with an in-memory reader
(``tests.support.metrics``), installed before any app is built."""

from __future__ import annotations

import pytest

from tests.support import metrics


def pytest_configure(config: pytest.Config) -> None:
    metrics.install()
