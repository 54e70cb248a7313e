"""Text work is linear in its input: every text rule, on adversarial fa / zh / en input of
32 KiB (the largest message a user can send), costs about 8 times what it costs on 4 KiB.

A rule whose time grows with the square of its input (a regex that rescans the rest of the
text from every near-match, a check of every match against every other) stalls the event loop
for seconds on one crafted message. Python's ``re`` has no step counter to bound, so this is
a CPU-time test (``time.process_time``: other processes on the machine do not count), made
generous enough for a busy machine:

* a rule that takes under ``QUICK`` on 32 KiB passes at once (whatever it does, it cannot
  stall the loop);
* otherwise its best time at 32 KiB must stay within ``GROWTH`` times its best time at 4 KiB
  (8 for linear work; a quadratic rule shows 50-90 here) and under ``CEILING`` outright.

The benchmark (``benchmarks/test_bench_text_linearity.py``) measures the same inputs with a
tighter gate.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.unit.domain.adversarial import (
    ADVERSARIES,
    LARGE,
    SMALL,
    Adversary,
    all_rules,
    cpu_seconds,
)

QUICK = 0.010
"""Seconds of CPU at 32 KiB under which a rule is not examined further."""
GROWTH = 24.0
"""At most this many times the time at 4 KiB, for 8 times the input."""
CEILING = 1.0
"""Seconds of CPU at 32 KiB, whatever the growth."""

RULES = all_rules()


def best(rule: Callable[[str], object], text: str, *, floor: float = 0.0, tries: int = 3) -> float:
    return min(cpu_seconds(rule, text, floor=floor) for _ in range(tries))


@pytest.mark.parametrize("adversary", ADVERSARIES, ids=lambda a: a.id)
def test_every_rule_is_linear_on_adversarial_input(adversary: Adversary) -> None:
    large, small = adversary.text(LARGE), adversary.text(SMALL)
    assert LARGE - 8 <= len(large.encode()) <= LARGE
    slow: list[str] = []
    for name, rule in RULES.items():
        first = cpu_seconds(rule, large)
        if first < QUICK:
            continue
        at_large = min(first, best(rule, large, tries=2))
        at_small = best(rule, small, floor=0.02)
        growth = at_large / at_small
        if growth > GROWTH or at_large > CEILING:
            slow.append(
                f"{name}: {at_large * 1e3:.0f} ms at 32 KiB, {growth:.0f}x its time at 4 KiB"
            )
    assert not slow, f"{adversary.id}: " + "; ".join(slow)


def test_the_adversaries_cover_every_language() -> None:
    assert {a.lang for a in ADVERSARIES} == {"fa", "zh", "en"}
    assert len({a.id for a in ADVERSARIES}) == len(ADVERSARIES)


def test_a_long_run_of_other_characters_streams_in_linear_time() -> None:
    """The builtin model's Chinese streaming grew one token a character at a time, copying the
    token for every character (1.5 s of CPU for a 512 KiB run; its replies are short, so this
    is its own, larger input)."""
    from threadkeeper.adapters.builtin_model import stream_tokens

    run = "a" * (512 * 1024)
    assert cpu_seconds(lambda text: stream_tokens(text, "zh"), run) < 0.5
    assert stream_tokens(run, "zh") == [run]
