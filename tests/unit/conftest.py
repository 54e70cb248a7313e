"""Hypothesis profiles for the unit suite, chosen by ``HYPOTHESIS_PROFILE`` (tox passes it on).

* ``dev`` (the default): Hypothesis's own defaults (100 examples per property).
* ``ci``: fewer examples, for a quick gate; CI may still pick ``dev`` or ``thorough``.
* ``thorough``: ten times the examples, for a night run or after changing a rule.

Property tests that need more examples than the default ask for a multiple of the profile's
``max_examples`` (``settings.default`` once this file is loaded), so every profile scales them.
An unknown profile name fails at start-up rather than silently running the default.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILE_VARIABLE = "HYPOTHESIS_PROFILE"

settings.register_profile("dev", settings(max_examples=100))
settings.register_profile("ci", settings(max_examples=25, print_blob=True))
settings.register_profile(
    "thorough",
    settings(max_examples=1_000, suppress_health_check=[HealthCheck.too_slow]),
)
settings.load_profile(os.environ.get(PROFILE_VARIABLE) or "dev")
