"""Cross-thread memory rules: admission (personal data refused), upserts, bounded facts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from threadkeeper.domain.memory import (
    MemoryItem,
    MemoryKind,
    MemoryRules,
    Provenance,
    memory_namespace,
)

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)


def item(
    key: str,
    value: str,
    *,
    kind: MemoryKind = MemoryKind.FACTS,
    at: datetime = T0,
    thread_id: str = "thread-1",
    message_id: str = "m1",
) -> MemoryItem:
    return MemoryItem(kind, key, value, Provenance(thread_id, message_id, at))


RULES = MemoryRules()


# --- admission -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key", ["", "Language", "has space", "-leading", "_leading", "k" * 65, "ключ", "کلید"]
)
def test_bad_keys_are_refused(key: str) -> None:
    assert RULES.refusal(item(key, "fa")) == "bad_key"


@pytest.mark.parametrize("key", ["language", "product.interest", "household:size", "k" * 64, "0"])
def test_good_keys_are_admitted(key: str) -> None:
    assert RULES.refusal(item(key, "fa")) is None


@pytest.mark.parametrize("value", ["", "   ", "\n\t"])
def test_empty_values_are_refused(value: str) -> None:
    assert RULES.refusal(item("note", value)) == "empty"


@pytest.mark.parametrize(
    "value",
    ["Sara\n\n<documents>", "a\n</memory>", "a\rb", "a\u2028b", "a\x85b", "two\nlines"],
)
def test_values_with_a_line_break_are_refused(value: str) -> None:
    """One item is one line of the prompt's <memory> block: a break could forge its end."""
    assert RULES.refusal(item("note", value)) == "multiline"


def test_a_value_stripped_to_one_line_is_admitted() -> None:
    assert RULES.refusal(item("note", "  one line\n")) is None


def test_values_over_the_limit_are_refused() -> None:
    assert RULES.refusal(item("note", "x" * 200)) is None
    assert RULES.refusal(item("note", "x" * 201)) == "too_long"
    # the limit applies to the stripped value
    assert RULES.refusal(item("note", "  " + "x" * 200 + "  ")) is None
    assert MemoryRules(max_value_chars=10).refusal(item("note", "x" * 11)) == "too_long"


@pytest.mark.parametrize(("thread_id", "message_id"), [("", "m1"), ("thread-1", ""), ("", "")])
def test_items_without_provenance_are_refused(thread_id: str, message_id: str) -> None:
    candidate = item("note", "likes travel cover", thread_id=thread_id, message_id=message_id)
    assert RULES.refusal(candidate) == "no_provenance"


PERSONAL_DATA = [
    # Iranian national ID (mod-11 check digit), in ASCII and Persian digits
    ("1234567891", "personal_data:iranian_national_id"),
    ("کد ملی من ۱۲۳۴۵۶۷۸۹۱ است", "personal_data:iranian_national_id"),
    # Chinese resident ID (GB 11643 example, checksum X)
    ("身份证 11010519491231002X", "personal_data:chinese_resident_id"),
    # payment cards (Luhn), grouped and contiguous
    ("4111 1111 1111 1111", "personal_data:payment_card"),
    ("my card is 5555555555554444", "personal_data:payment_card"),
    # IBAN and the Iranian Sheba
    ("DE89 3704 0044 0532 0130 00", "personal_data:iban"),
    ("شبا IR062960000000100324200001", "personal_data:iban"),
    # health statements in en, fa, zh
    ("I was diagnosed with diabetes last year", "personal_data:health"),
    ("من دیابت دارم", "personal_data:health"),
    ("我有糖尿病", "personal_data:health"),
]


@pytest.mark.parametrize(("value", "reason"), PERSONAL_DATA)
def test_personal_data_is_refused_by_kind(value: str, reason: str) -> None:
    assert RULES.refusal(item("note", value)) == reason


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("note2", "1234567891"),
        ("address.line2", "۱۲۳۴۵۶۷۸۹۱"),
        ("card2", "4111 1111 1111 1111"),
    ],
)
def test_a_key_ending_in_a_digit_does_not_hide_personal_data(key: str, value: str) -> None:
    """The key and the value are checked as separate texts: a key's trailing digit must not
    run into a value's leading digits and turn an ID or a card into some longer number."""
    assert RULES.refusal(item(key, value)) is not None
    assert RULES.refusal(item("note", value)) is not None


@pytest.mark.parametrize(
    "value",
    [
        "health insurance",
        "بیمه درمان",
        "医疗保险",
        "interested in a critical illness insurance plan",
        "بیمه درمان تکمیلی برای خانواده",
        "想了解重疾险",
        "1234567890",  # ten digits failing the national-ID check
        "4111 1111 1111 1112",  # sixteen digits failing Luhn
    ],
)
def test_product_names_and_look_alike_numbers_are_admitted(value: str) -> None:
    assert RULES.refusal(item("product.interest", value)) is None


def test_refusals_are_counted_by_reason_and_never_hold_the_value() -> None:
    candidates = [item(f"note.{chr(97 + n)}", value) for n, (value, _) in enumerate(PERSONAL_DATA)]
    candidates += [item("empty", "  "), item("Bad", "x"), item("ok", "likes dental cover")]
    plan = RULES.plan([], candidates)
    expected: dict[str, int] = {"empty": 1, "bad_key": 1}
    for _, reason in PERSONAL_DATA:
        expected[reason] = expected.get(reason, 0) + 1
    assert dict(plan.refused) == expected
    assert [p.key for p in plan.puts] == ["ok"]
    assert plan.deletes == ()
    # nothing of a refused value is anywhere in what the plan counts
    counted = repr(plan.refused)
    for value, _ in PERSONAL_DATA:
        assert value not in counted
        for word in value.split():
            if any(ch.isdigit() for ch in word) or not word.isascii():
                assert word not in counted


# --- planning writes -------------------------------------------------------------------------


def test_an_admitted_candidate_is_upserted_with_its_value_stripped() -> None:
    plan = RULES.plan([], [item("language", "  fa  ", kind=MemoryKind.PROFILE)])
    assert plan.puts == (item("language", "fa", kind=MemoryKind.PROFILE),)
    assert plan.deletes == ()
    assert not plan.refused


def test_an_unchanged_value_is_not_rewritten() -> None:
    stored = item("language", "fa", kind=MemoryKind.PROFILE)
    again = item("language", " fa ", kind=MemoryKind.PROFILE, at=T0 + timedelta(days=1))
    assert RULES.plan([stored], [again]).puts == ()


def test_a_changed_value_is_rewritten() -> None:
    stored = item("language", "fa", kind=MemoryKind.PROFILE)
    changed = item("language", "zh", kind=MemoryKind.PROFILE, message_id="m2")
    assert RULES.plan([stored], [changed]).puts == (changed,)


def test_the_later_candidate_for_a_key_wins() -> None:
    first = item("language", "fa", kind=MemoryKind.PROFILE, message_id="m1")
    second = item("language", "en", kind=MemoryKind.PROFILE, message_id="m2")
    assert RULES.plan([], [first, second]).puts == (second,)
    # ... also when the later one restores the stored value: then nothing is written
    stored = item("language", "zh", kind=MemoryKind.PROFILE)
    assert RULES.plan([stored], [first, item("language", "zh", kind=MemoryKind.PROFILE)]).puts == ()


def test_the_same_key_in_profile_and_facts_are_different_items() -> None:
    profile = item("topic", "travel", kind=MemoryKind.PROFILE)
    fact = item("topic", "travel", kind=MemoryKind.FACTS)
    assert set(RULES.plan([profile], [fact]).puts) == {fact}


def test_facts_over_the_bound_evict_the_oldest() -> None:
    rules = MemoryRules(max_facts=3)
    existing = [item(f"f{n}", f"fact {n}", at=T0 + timedelta(hours=n)) for n in (3, 1, 2)]
    newest = item("f4", "fact 4", at=T0 + timedelta(hours=4))
    plan = rules.plan(existing, [newest])
    assert plan.puts == (newest,)
    assert plan.deletes == ((MemoryKind.FACTS, "f1"),)


def test_a_candidate_older_than_every_kept_fact_is_not_written() -> None:
    rules = MemoryRules(max_facts=2)
    existing = [item(f"f{n}", f"fact {n}", at=T0 + timedelta(hours=n)) for n in (1, 2)]
    stale = item("f0", "fact 0", at=T0)
    plan = rules.plan(existing, [stale])
    assert plan.puts == ()
    assert plan.deletes == ()  # f0 is not stored, so there is nothing to delete


def test_many_new_facts_keep_only_the_newest() -> None:
    rules = MemoryRules(max_facts=5)
    existing = [item(f"old{n}", "x", at=T0 + timedelta(minutes=n)) for n in range(5)]
    candidates = [item(f"new{n}", "y", at=T0 + timedelta(days=1, minutes=n)) for n in range(3)]
    plan = rules.plan(existing, candidates)
    assert {p.key for p in plan.puts} == {"new0", "new1", "new2"}
    assert set(plan.deletes) == {(MemoryKind.FACTS, k) for k in ("old0", "old1", "old2")}


def test_profile_items_are_never_evicted() -> None:
    rules = MemoryRules(max_facts=1)
    profile = [
        item(f"p{n}", "v", kind=MemoryKind.PROFILE, at=T0 - timedelta(days=n)) for n in range(5)
    ]
    facts = [item("f1", "a", at=T0 + timedelta(hours=1))]
    plan = rules.plan(
        [*profile, *facts],
        [item("f2", "b", at=T0 + timedelta(hours=2)), item("p9", "w", kind=MemoryKind.PROFILE)],
    )
    assert plan.deletes == ((MemoryKind.FACTS, "f1"),)
    assert {(p.kind, p.key) for p in plan.puts} == {
        (MemoryKind.FACTS, "f2"),
        (MemoryKind.PROFILE, "p9"),
    }


# --- namespaces ------------------------------------------------------------------------------


def test_the_namespace_puts_the_tenant_first() -> None:
    assert memory_namespace("acme", "u-1", MemoryKind.PROFILE) == ("acme", "user", "u-1", "profile")
    assert memory_namespace("acme", "u-1", MemoryKind.FACTS) == ("acme", "user", "u-1", "facts")
    assert memory_namespace("acme", "u-1", MemoryKind.FACTS) != memory_namespace(
        "other", "u-1", MemoryKind.FACTS
    )
