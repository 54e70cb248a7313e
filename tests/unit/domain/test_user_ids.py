"""User ids as backends send them (issue 29, item 3): any printable id of 1 to 128 characters,
stored as itself when it is of the plain alphabet (every id accepted before keeps its stored
key) and as ``~`` + SHA-256 hex otherwise — and an attacker's crafted id never lands on another
user's stored form or makes a thread key ambiguous."""

from __future__ import annotations

import hashlib
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from threadkeeper.domain.threads import (
    HASHED_USER_ID,
    TENANT_OR_USER_ID,
    USER_ID_PATH_PATTERN,
    USER_ID_PATTERN,
    ThreadRef,
    is_stored_user_id,
    stored_user_id,
    user_id_problem,
)

PRINTABLE = st.from_regex(USER_ID_PATTERN, fullmatch=True)
PLAIN = st.from_regex(TENANT_OR_USER_ID, fullmatch=True)
CRAFTED = st.one_of(
    PRINTABLE,
    PLAIN,
    # another user's stored form, sent as an id; and near misses of it
    PLAIN.map(lambda p: "~" + hashlib.sha256(p.encode()).hexdigest()),
    st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda h: "~" + h),
    st.text(string.ascii_letters + ":%_*?[]\\{}|@/~", min_size=1, max_size=20),
)


@given(PLAIN)
def test_every_id_accepted_before_keeps_its_stored_key(user_id: str) -> None:
    assert stored_user_id(user_id) == user_id


@given(CRAFTED, CRAFTED)
def test_distinct_ids_never_share_a_stored_form(first: str, second: str) -> None:
    if user_id_problem(first) or user_id_problem(second) or first == second:
        return
    assert stored_user_id(first) != stored_user_id(second)


@given(CRAFTED)
def test_a_stored_form_is_plain_or_a_hash_never_a_separator(user_id: str) -> None:
    if user_id_problem(user_id):
        return
    stored = stored_user_id(user_id)
    assert is_stored_user_id(stored)
    assert ":" not in stored  # the thread key tenant:user:thread stays unambiguous
    assert not set(stored) & set("%_*?[]\\{}") or TENANT_OR_USER_ID.fullmatch(stored), stored
    if not TENANT_OR_USER_ID.fullmatch(user_id):
        assert HASHED_USER_ID.fullmatch(stored)
        ThreadRef("acme", stored, "t1")  # a key can be made of it


@given(st.text(string.hexdigits.lower()[:16], min_size=64, max_size=64))
def test_an_id_sent_as_a_stored_hash_is_hashed_again(digest: str) -> None:
    """No caller can name another user's stored form: ``~<hex>`` as sent is not plain."""
    crafted = "~" + digest
    assert stored_user_id(crafted) != crafted


@pytest.mark.parametrize(
    "user_id",
    ["erin@example.com", "auth0|5f3c9a", "a:b", "a b", "Ünïcødé", "用户-42", "x/y", "~", "%"],
)
def test_ids_real_backends_use_are_accepted(user_id: str) -> None:
    assert user_id_problem(user_id) is None
    assert HASHED_USER_ID.fullmatch(stored_user_id(user_id))


@pytest.mark.parametrize(
    ("user_id", "words"),
    [
        ("", "the user id is empty"),
        ("x" * 129, "the user id has 129 characters"),
        ("a\tb", "control character at 1"),
        ("a\x00", "control character at 1"),
        ("ab\x85", "control character at 2"),
        ("a\x7f", "control character at 1"),
        (" a", "starts or ends with a space"),
    ],
)
def test_a_refused_id_is_told_in_words(user_id: str, words: str) -> None:
    problem = user_id_problem(user_id)
    assert problem is not None
    assert words in problem
    assert "1 to 128 printable characters" in problem
    with pytest.raises(ValueError, match=words):
        stored_user_id(user_id)


@given(st.text(max_size=140))
def test_the_pattern_and_the_words_agree(user_id: str) -> None:
    """The OpenAPI document's pattern says what ``user_id_problem`` accepts."""
    import re

    assert (re.fullmatch(USER_ID_PATTERN, user_id) is not None) == (
        user_id_problem(user_id) is None
    )


@given(st.from_regex(USER_ID_PATH_PATTERN, fullmatch=True))
def test_an_id_a_path_carries_is_a_user_id_without_slash_or_dot_segment(user_id: str) -> None:
    assert user_id_problem(user_id) is None
    assert not set(user_id) & set("/?#")
    assert user_id not in {".", ".."}


@pytest.mark.parametrize("user_id", ["a/b", "a?b", "#", ".", "..", " a", "a "])
def test_a_path_cannot_carry_these(user_id: str) -> None:
    import re

    assert re.fullmatch(USER_ID_PATH_PATTERN, user_id) is None


def test_a_thread_ref_takes_only_stored_forms() -> None:
    with pytest.raises(ValueError, match="stored_user_id"):
        ThreadRef("acme", "erin@example.com", "t1")
    assert ThreadRef("acme", stored_user_id("erin@example.com"), "t1").key.count(":") == 2
