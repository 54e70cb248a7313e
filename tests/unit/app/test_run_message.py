"""The size rule of a run's message is checked once, where the message is made
(``RunMessage``): every way a message reaches a run — the route, the CLI, a test — is held to
it, and nothing after it checks again."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from threadkeeper.app.service import MAX_MESSAGE_BYTES, MessageTooLong, RunMessage, problem_spec

UNITS = st.sampled_from(["x", "é", "保", "🙂", "\u200b"])  # 1, 2, 3, 4 and 3 bytes of UTF-8


@given(unit=UNITS, extra=st.integers(min_value=-3, max_value=3))
def test_a_message_is_made_iff_it_is_within_32_kib_of_utf8(unit: str, extra: int) -> None:
    size = len(unit.encode("utf-8"))
    content = unit * (MAX_MESSAGE_BYTES // size + extra)
    within = len(content.encode("utf-8")) <= MAX_MESSAGE_BYTES
    if within:
        assert RunMessage(content).content == content
    else:
        with pytest.raises(MessageTooLong) as refused:
            RunMessage(content)
        assert refused.value.size == len(content.encode("utf-8"))
        spec = problem_spec(refused.value)
        assert spec is not None
        assert (spec.status, spec.slug) == (413, "message-too-large")


def test_the_limit_itself_is_within() -> None:
    assert RunMessage("x" * MAX_MESSAGE_BYTES).content
    with pytest.raises(MessageTooLong):
        RunMessage("x" * MAX_MESSAGE_BYTES + "y")
