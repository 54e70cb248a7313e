"""Household statements whose second clause shares the speaker as subject.

"I am married and have two kids" states both parts, just like "I am married and I have two
kids"; so do «متاهل هستم و دو فرزند دارم» and «我结婚了，有两个孩子». Only a first-person
lead clause lends its subject: "my friends are married and have two kids" stays someone
else's household.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from threadkeeper.domain import extraction
from threadkeeper.domain.extraction import detect_household
from threadkeeper.domain.text import fold


@pytest.mark.parametrize(
    ("text", "summary"),
    [
        # English: the subject of "and have" is the speaker of the clause before it
        ("I am married and have two kids", "married; 2 children"),
        ("I am married and I have two kids", "married; 2 children"),
        ("I'm happily married and have 3 children", "married; 3 children"),
        ("We're married and have a son and a daughter", "married; 2 children"),
        ("We got married and have a daughter", "married; 1 child"),
        ("I live with my wife and have two kids", "married; 2 children"),
        ("I'm married and have kids", "married; has children"),
        ("I am married and have no kids", "married; no children"),
        ("I'm married and don't have any children", "married; no children"),
        ("I'm single and have one son", "single; 1 child"),
        # Persian: the verb carries the person, with or without «من»
        ("متاهل هستم و دو فرزند دارم", "married; 2 children"),
        ("متاهلم و دو تا بچه دارم", "married; 2 children"),
        ("ازدواج کرده‌ام و یک پسر و یک دختر داریم", "married; 2 children"),
        ("مجرد هستم و بچه ندارم", "single; no children"),
        # Chinese: 有… after the speaker's own statement
        ("我结婚了，有两个孩子", "married; 2 children"),
        ("我已经结婚了，还有一儿一女", "married; 2 children"),
        ("我已婚并且有一个儿子", "married; 1 child"),
        ("我结婚了，有孩子", "married; has children"),
        ("我结婚了，还没有孩子", "married; no children"),
        ("我单身，有一个女儿", "single; 1 child"),
    ],
)
def test_the_second_clause_shares_the_speaker(text: str, summary: str) -> None:
    assert detect_household(text) == summary


@pytest.mark.parametrize(
    "text",
    [
        "My friends are married and have two kids",
        "I think my friends are married and have two kids",
        "I know they are married and have two kids",
        "My sister is married and has two kids",
        "دوستم متاهل است و دو بچه دارد",
        "我朋友结婚了，有两个孩子",
        "他结婚了，有三个孩子",
        "我妹妹结婚了，有两个孩子",
    ],
)
def test_someone_elses_statement_lends_no_subject(text: str) -> None:
    assert detect_household(text) is None


@pytest.mark.parametrize(
    ("text", "summary"),
    [
        ("I am married and have two cars", "married"),
        ("I am a teacher and have two questions", None),
        # a number in the lead clause is not a child count
        ("I'm 35 and have two kids", "2 children"),
    ],
)
def test_only_children_after_the_shared_verb_count(text: str, summary: str | None) -> None:
    assert detect_household(text) == summary


# --- the Persian list of children, read once (issue 6's review) -----------------------------

FA_TOKENS = [
    "یک", "یه", "دو", "سه", "2", "12", "123", "تا", "فرزند", "فرزندان", "بچه", "پسر", "دختر",
    "ها", "های", "ان", "م", "و", "،", ",", "کوچک", "خوب", "دارم", "داریم", "ندارم", "دارد",
    "من", " ", "\u200c",
]  # fmt: skip
# The plain form the Persian statement had: a list of children, up to two words, the verb.
# Read from each item again when the verb never comes, it was quadratic in the list's length.
FA_PLAIN = re.compile(
    extraction._FA_ITEMS + rf"(?:\s+{extraction._FA_LETTER}+){{0,2}}?\s+{extraction._FA_HAVE}"
)


def fa_statements(text: str) -> list[tuple[int, int]]:
    return [
        m.span() for m in extraction._FA_COUNT_RES[0].finditer(text) if m.group("verb") is not None
    ]


@settings(max_examples=5 * settings().max_examples, deadline=None)
@given(st.lists(st.sampled_from(FA_TOKENS), max_size=16), st.sampled_from([" ", ""]))
def test_the_persian_list_reads_the_statements_of_its_plain_form(
    tokens: list[str], joiner: str
) -> None:
    text = fold(joiner.join(tokens))
    assert fa_statements(text) == [m.span() for m in FA_PLAIN.finditer(text)], text


@pytest.mark.parametrize(
    ("text", "summary"),
    [
        ("دو بچه و یک پسر دارم", "3 children"),
        ("دو تا بچه‌ی کوچک دارم", "2 children"),
        ("دو بچه دو بچه دارم", "4 children"),  # as before: the words before the verb count
        ("دو بچه، یک دختر خوب داریم", "3 children"),
        ("دو بچه و " * 50 + "دارم", None),  # 100 children: over the bound, as before
        ("دو بچه و " * 50, None),  # a list that never says «دارم»
    ],
)
def test_persian_lists_of_children(text: str, summary: str | None) -> None:
    assert detect_household(text) == summary
