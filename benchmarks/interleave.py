"""Time two (or more) conversations turn by turn, alternately, so a slow spell hits them alike.

The storage benchmarks time each arm's conversation in a test of its own, one after another;
a gate on one arm's time ÷ another's then also measures whatever else the machine did between
them (on a shared 2-core box: a neighbour, the database's background writer after the arm
before) — a CI run once saw the chosen Redis arm at 1.10× plain, where it measures 0.52–0.68×
whenever the two are run back to back in quiet. ``alternate`` runs turn *i* of every side
before turn *i + 1* of any, rotating which side goes first, and sums each side's own turn
times, so the ratio of the sums compares the arms under the same conditions.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence

Turn = Callable[[int], Awaitable[object]]
"""One side's turn ``i`` (0-based)."""


async def alternate(sides: Sequence[Turn], turns: int) -> list[float]:
    """Seconds each side spent in its own ``turns`` turns, the sides taking turns."""
    spent = [0.0] * len(sides)
    for i in range(turns):
        for k in range(len(sides)):
            side = (i + k) % len(sides)  # side i mod n goes first on turn i
            start = time.perf_counter()
            await sides[side](i)
            spent[side] += time.perf_counter() - start
    return spent


def time_over_plain(chosen_s: float, plain_s: float, turns: int, gate: float) -> dict[str, object]:
    """A gated pair's ``extra_info``: each side's seconds and their ratio, gated at ``gate``."""
    return {
        "role": "threadkeeper",
        "turns": turns,
        "chosen_s": round(chosen_s, 3),
        "plain_s": round(plain_s, 3),
        "time_over_plain": round(chosen_s / plain_s, 3),
        "gate_max": {"time_over_plain": gate},
    }
