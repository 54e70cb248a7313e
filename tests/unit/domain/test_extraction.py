"""Rule-based memory extraction (threadkeeper.domain.extraction).

Every kind of item (language, formality, products, household) is exercised in Persian,
Chinese and English, with the negatives that matter: no signal gives nothing, statements about
someone else give no household, products named only in the assistant's answer are not the
user's, and personal data in the human message never reaches a value the plan would write.
"""

from __future__ import annotations

import re
from collections import Counter
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage

from threadkeeper.domain import extraction
from threadkeeper.domain.extraction import (
    FORMALITY_KEY,
    HOUSEHOLD_KEY,
    LANGUAGE_KEY,
    PRODUCTS,
    RoundText,
    detect_formality,
    detect_household,
    detect_language,
    detect_products,
    extract_and_plan,
    extract_memory,
    merge_household,
)
from threadkeeper.domain.memory import (
    KEY_PATTERN,
    MemoryItem,
    MemoryKind,
    MemoryRules,
    Provenance,
)
from threadkeeper.domain.pii import find_personal_data, is_valid_iranian_national_id
from threadkeeper.domain.text import fold

T0 = datetime(2026, 3, 1, 9, 30, tzinfo=UTC)
RULES = MemoryRules()
SOURCE = Provenance("thread-7", "msg-42", T0)


def round_of(human: str, answer: str = "") -> RoundText:
    return RoundText(thread_id="thread-7", message_id="msg-42", human=human, answer=answer, at=T0)


def slugs(text: str) -> list[str]:
    return [p.slug for p in detect_products(text)]


def profile(key: str, value: str, source: Provenance = SOURCE) -> MemoryItem:
    return MemoryItem(MemoryKind.PROFILE, key, value, source)


def fact(slug: str, value: str, source: Provenance = SOURCE) -> MemoryItem:
    return MemoryItem(MemoryKind.FACTS, f"product:{slug}", value, source)


def national_id(prefix: str) -> str:
    """``prefix`` (9 digits) with its Iranian national-ID check digit, computed here."""
    s = sum(int(prefix[i]) * (10 - i) for i in range(9)) % 11
    return prefix + str(s if s < 2 else 11 - s)


# --- language --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("سلام، بیمه عمر چیست؟", "fa"),
        ("بيمه تكميلي دارید؟", "fa"),  # Arabic letter variants
        ("سلام، بیمه travel دارید؟", "fa"),  # an English word inside Persian
        ("重疾险是什么？", "zh"),
        ("你好，请问health insurance怎么买", "zh"),
        ("What does travel insurance cover?", "en"),
        ("yes", "en"),
        ("Hello, what does 重疾险 cover exactly?", "en"),
    ],
)
def test_language_is_the_dominant_script(text: str, language: str) -> None:
    assert detect_language(text) == language


@pytest.mark.parametrize(
    "text",
    [
        "",
        "ok",  # two letters: not enough to be sure
        "你好",  # two characters
        "۱۲۳۴ 5678 !!!",  # no letters at all
        "What is 重疾险?",  # no script dominates
        "我想买car insurance",
        "Привет, как дела?",  # another script
    ],
)
def test_language_is_not_guessed(text: str) -> None:
    assert detect_language(text) is None


# --- formality -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "register"),
    [
        # Persian
        ("لطفاً درباره بیمه عمر توضیح بفرمایید", "formal"),
        ("ممنون می‌شوم اگر شرایط را بگویید", "formal"),
        ("جناب آقای مشاور، بیمه بدنه چقدر است؟", "formal"),
        ("سرکار خانم، شما بیمه مسافرتی دارید؟", "formal"),
        ("سلام چطوری؟ بیمه تکمیلی چی داری؟", "informal"),
        ("مرسی داداش، دمت گرم", "informal"),
        ("تو می‌دونی بیمه ثالث چنده؟", "informal"),
        # Chinese
        ("您好，请问重疾险怎么买？", "formal"),
        ("麻烦您帮我看一下保单", "formal"),
        ("你这个车险多少钱啊？", "informal"),
        ("你说我该买哪个吧", "informal"),
        ("嘿，旅游险咋买", "informal"),
        # English
        ("Dear Sir or Madam, I would appreciate a quote. Kind regards", "formal"),
        ("Could you please explain the waiting period?", "formal"),
        ("hey, gonna need travel insurance lol", "informal"),
        ("hi there! thx for the help", "informal"),
        ("can u tell me wanna know the price", "informal"),
    ],
)
def test_formality_signals(text: str, register: str) -> None:
    assert detect_formality(text) == register


@pytest.mark.parametrize(
    "text",
    [
        "بیمه عمر چیست؟",
        "重疾险是什么",
        "你好，重疾险是什么",  # 你 without a casual particle is the ordinary "you"
        "What is travel insurance?",
        "Oh dear, my policy expired",  # "dear" not as a salutation
        "لطفا بگو تو این بیمه چی هست",  # one formal, one informal: no clear signal
        "شماره تلفن پشتیبانی چیست؟",  # شماره (number) is not شما
        "توضیح بدهید",  # توضیح is not تو
    ],
)
def test_no_clear_formality_gives_nothing(text: str) -> None:
    assert detect_formality(text) is None


# --- products --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # Persian
        ("بیمه درمان می‌خواهم", ["health"]),
        ("بیمه تکمیلی دندانپزشکی را پوشش می‌دهد؟", ["supplementary-health", "dental"]),
        ("بیمه درمان تکمیلی برای خانواده", ["supplementary-health"]),
        ("بیمه‌ی عمر و بیمه‌های مسافرتی", ["life", "travel"]),
        ("بیمه‌نامه عمرم کی تمدید می‌شود؟", ["life"]),
        ("بیمه شخص ثالث و بدنه خودرو", ["car-third-party", "car-body"]),
        ("بيمه بدنه", ["car-body"]),  # Arabic yeh
        ("هزینه زایمان را بیمه پوشش می‌دهد؟", ["maternity"]),
        ("بیمه آتش‌سوزی منزل", ["home"]),
        ("بیمه بیماری‌های خاص", ["critical-illness-cover"]),
        ("بیمه حیوانات خانگی دارید؟", ["pet"]),
        # Chinese
        ("请问重疾险和医疗险有什么区别？", ["critical-illness-cover", "health"]),
        ("我想买健康险", ["health"]),
        ("车险和交强险", ["car", "car-third-party"]),
        ("旅游保险多少钱", ["travel"]),
        ("旅行险", ["travel"]),
        ("少儿重疾险", ["critical-illness-cover"]),
        ("补充医疗保险", ["supplementary-health"]),
        ("牙科能报销吗", ["dental"]),
        ("宠物险", ["pet"]),
        ("防癌险", ["cancer-cover"]),
        # English
        ("What does health insurance cover?", ["health"]),
        ("Is dental covered by my plan?", ["dental"]),
        ("I need travel insurance and pet cover", ["travel", "pet"]),
        ("pet health insurance", ["pet"]),  # leftmost-longest, not also health
        ("supplementary health insurance", ["supplementary-health"]),
        (
            "third-party car insurance vs comprehensive car insurance",
            ["car-third-party", "car-body"],
        ),
        ("Critical illness cover or life insurance?", ["critical-illness-cover", "life"]),
        ("Maternity: is it covered?", ["maternity"]),
        ("home insurance and HOME INSURANCE", ["home"]),  # each product once
    ],
)
def test_products_named_by_the_user(text: str, expected: list[str]) -> None:
    assert slugs(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "بیمه دارم",  # insurance, no product
        "I have a dentist appointment tomorrow",  # a bare topic without insurance talk
        "دندانپزشکی نزدیک خانه",
        "看牙很贵",
        "I travel a lot for work",
        "my life is busy",
        "保险",
    ],
)
def test_no_product_is_named(text: str) -> None:
    assert slugs(text) == []


def test_every_lexicon_name_finds_its_product() -> None:
    for product in PRODUCTS:
        for name in (*product.en, *product.fa, *product.zh):
            assert slugs(name) == [product.slug], name


def test_bare_topics_need_insurance_talk() -> None:
    context = {"en": "Is {} covered by my policy?", "fa": "آیا {} را بیمه پوشش می‌دهد؟"}
    for product in PRODUCTS:
        for topic in product.bare:
            assert slugs(topic) == [], topic
            template = (
                context["en"]
                if topic.isascii()
                else context["fa"]
                if any("\u0600" <= c <= "\u06ff" for c in topic)
                else "{}能报销吗"
            )
            assert slugs(template.format(topic)) == [product.slug], topic


def test_the_lexicon_is_admissible_and_unique() -> None:
    assert len({p.slug for p in PRODUCTS}) == len(PRODUCTS)
    assert len({p.name for p in PRODUCTS}) == len(PRODUCTS)
    for product in PRODUCTS:
        assert KEY_PATTERN.fullmatch(product.key)
        assert RULES.refusal(fact(product.slug, product.name)) is None, product.slug


# --- household -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "summary"),
    [
        # Persian
        ("من متأهل هستم و دو فرزند دارم", "married; 2 children"),
        ("دو فرزند دارم", "2 children"),
        ("۳ تا بچه داریم", "3 children"),
        ("یک پسر و یک دختر دارم", "2 children"),
        ("همسرم و ۲ تا بچه‌هام رو می‌خوام بیمه کنم", "married; 2 children"),
        ("برای همسرم بیمه می‌خواهم", "married"),
        ("ازدواج کرده‌ام", "married"),
        ("مجرد هستم و تنها زندگی می‌کنم", "single; lives alone"),
        ("متاهل نیستم", "single"),
        ("بچه ندارم", "no children"),
        ("پسرم دانشجوست", "has children"),
        # Chinese
        ("我有两个孩子", "2 children"),
        ("我有一儿一女", "2 children"),
        ("我们家有一个儿子和一个女儿", "2 children"),
        ("我有个女儿", "1 child"),
        ("我太太想买旅游险", "married"),
        ("我结婚了，有三个孩子", "married; 3 children"),  # 有… shares the subject 我
        ("我结婚了，我有三个孩子", "married; 3 children"),
        ("我和老婆有两个孩子", "married"),
        ("我单身，一个人住", "single"),
        ("我独居", "lives alone"),
        ("我没有孩子", "no children"),
        # English
        ("I have two kids", "2 children"),
        ("I'm married and I have a son and two daughters", "married; 3 children"),
        ("My wife and I have 3 children", "married; 3 children"),
        ("we've got one little girl", "1 child"),
        ("my husband wants life insurance", "married"),
        ("I live alone", "lives alone"),
        ("I'm single and I have no kids", "single; no children"),
        ("cover for my kids", "has children"),
        ("my two kids need dental cover", "2 children"),
    ],
)
def test_household_the_user_volunteers(text: str, summary: str) -> None:
    assert detect_household(text) == summary


@pytest.mark.parametrize(
    ("n", "numeral"), [(1, "一"), (2, "两"), (2, "二"), (3, "三"), (4, "四"), (5, "五")]
)
def test_chinese_numerals_count_children(n: int, numeral: str) -> None:
    expected = "1 child" if n == 1 else f"{n} children"
    assert detect_household(f"我有{numeral}个孩子") == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("۲ فرزند دارم", "2 children"),
        ("٤ فرزند دارم", "4 children"),
        ("4 فرزند دارم", "4 children"),
    ],
)
def test_persian_and_arabic_digits_count_children(text: str, expected: str) -> None:
    assert detect_household(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        # someone else's household
        "my friend has two kids",
        "My sister is married",
        "my friend's wife needs travel insurance",
        "I have a friend with two kids",
        "دوستم دو بچه دارد",
        "خواهرم متاهل است",
        "همسر دوستم بیمه عمر دارد",
        "我朋友有两个孩子",
        "我有个朋友有两个孩子",
        "他太太想买保险",
        # not household at all
        "I have two questions about my policy",
        "我有两个女朋友",
        "I have a car",
    ],
)
def test_no_household_from_other_peoples_lives(text: str) -> None:
    assert detect_household(text) is None


@pytest.mark.parametrize(
    ("text", "summary"),
    [
        ("My wife is pregnant, does the plan cover it?", "married"),
        ("I have two kids, one has asthma", "2 children"),
        ("my son Ali is 5 years old", "has children"),
        ("همسرم باردار است", "married"),
        ("دو فرزند دارم که یکی دیابت دارد", "2 children"),
        ("我太太怀孕了", "married"),
        ("我有两个孩子，一个有哮喘", "2 children"),
    ],
)
def test_household_never_carries_health_names_or_ages(text: str, summary: str) -> None:
    value = detect_household(text)
    assert value == summary
    assert find_personal_data(value) == []


def test_contradicting_statements_drop_the_part() -> None:
    assert detect_household("I'm married. I'm single.") is None
    assert detect_household("I have two kids. my 3 children") == "has children"
    assert detect_household("I have no kids but my son is 4") is None


# --- merge of household summaries ------------------------------------------------------------


@pytest.mark.parametrize(
    ("stored", "new", "merged"),
    [
        ("2 children", "married", "married; 2 children"),
        ("married; 2 children", "has children", "married; 2 children"),
        ("married; 2 children", "3 children", "married; 3 children"),
        ("single; lives alone", "married", "married; lives alone"),
        ("no children", "has children", "has children"),
        ("something an LLM wrote", "married", "married"),
    ],
)
def test_household_merges_part_by_part(stored: str, new: str, merged: str) -> None:
    assert merge_household(stored, new) == merged


# --- extract_memory --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("human", "expected"),
    [
        (
            "سلام، لطفاً درباره بیمه تکمیلی توضیح بفرمایید. متاهل هستم و دو فرزند دارم.",
            [
                profile(LANGUAGE_KEY, "fa"),
                profile(FORMALITY_KEY, "formal"),
                profile(HOUSEHOLD_KEY, "married; 2 children"),
                fact("supplementary-health", "supplementary health insurance"),
            ],
        ),
        (
            "你好啊，我有两个孩子，车险多少钱啊？",
            [
                profile(LANGUAGE_KEY, "zh"),
                profile(FORMALITY_KEY, "informal"),
                profile(HOUSEHOLD_KEY, "2 children"),
                fact("car", "car insurance"),
            ],
        ),
        (
            "Could you please compare dental cover and travel insurance for my husband?",
            [
                profile(LANGUAGE_KEY, "en"),
                profile(FORMALITY_KEY, "formal"),
                profile(HOUSEHOLD_KEY, "married"),
                fact("dental", "dental cover"),
                fact("travel", "travel insurance"),
            ],
        ),
    ],
)
def test_extract_memory_builds_items_with_provenance(
    human: str, expected: list[MemoryItem]
) -> None:
    items = extract_memory(round_of(human))
    assert items == expected
    for item in items:
        assert item.source == Provenance("thread-7", "msg-42", T0)
        assert KEY_PATTERN.fullmatch(item.key)
        assert RULES.refusal(item) is None


@pytest.mark.parametrize("human", ["", "ok", "?", "۱۲۳", "👍"])
def test_nothing_to_remember(human: str) -> None:
    assert extract_memory(round_of(human)) == []


@pytest.mark.parametrize(
    ("human", "answer"),
    [
        ("Which one do you recommend?", "Health insurance or critical illness cover would fit."),
        ("کدام را پیشنهاد می‌کنید؟", "بیمه عمر و بیمه تکمیلی را پیشنهاد می‌کنم. همسرم ..."),
        ("推荐哪个？", "建议您买重疾险和医疗险，我有两个孩子"),
    ],
)
def test_the_answer_is_never_read(human: str, answer: str) -> None:
    items = extract_memory(round_of(human, answer))
    assert [i for i in items if i.kind is MemoryKind.FACTS] == []
    assert all(i.key != HOUSEHOLD_KEY for i in items)
    # the same answer as a human message would have given facts: the test can fail
    assert any(i.kind is MemoryKind.FACTS for i in extract_memory(round_of(answer)))


def test_nothing_else_is_extracted() -> None:
    """Bounded, extraction-based memory: only the four kinds of key, never the message."""
    human = "My name is Sara, I was born in 1990 and I love hiking. I'm married. Travel insurance?"
    items = extract_memory(round_of(human))
    assert {i.key for i in items} == {LANGUAGE_KEY, HOUSEHOLD_KEY, "product:travel"}
    for item in items:
        assert "sara" not in item.value.lower()
        assert "1990" not in item.value


def test_extraction_is_deterministic() -> None:
    human = "سلام، بیمه عمر و بیمه درمان و بیمه مسافرتی؛ همسرم و سه فرزندم"
    first = extract_memory(round_of(human))
    assert first == extract_memory(round_of(human))
    assert [i.key for i in first] == [
        LANGUAGE_KEY,
        HOUSEHOLD_KEY,
        "product:life",
        "product:health",
        "product:travel",
    ]


def test_round_from_messages_uses_the_human_message_id() -> None:
    human = HumanMessage(content=[{"type": "text", "text": "travel insurance?"}], id="h-1")
    answer = AIMessage(content="Here are the options.", id="a-1")
    round_ = RoundText.from_messages("thread-9", human, answer, T0)
    assert round_ == RoundText("thread-9", "h-1", "travel insurance?", "Here are the options.", T0)
    assert extract_memory(round_)[-1].source == Provenance("thread-9", "h-1", T0)
    with pytest.raises(ValueError, match="no id"):
        RoundText.from_messages("thread-9", HumanMessage(content="hi"), answer, T0)


# --- planning, with personal data in the message ---------------------------------------------

NID = national_id("047123456")


def test_the_national_id_used_below_is_valid() -> None:
    assert is_valid_iranian_national_id(NID)
    assert find_personal_data(f"کد ملی من {NID} است")


@pytest.mark.parametrize(
    ("human", "secret", "products"),
    [
        (f"کد ملی من {NID} است، بیمه تکمیلی می‌خواهم", NID, ["supplementary-health"]),
        (
            "کد ملی " + NID.translate(str.maketrans("0123456789", "۰۱۲۳۴۵۶۷۸۹")) + " بیمه عمر",
            NID,
            ["life"],
        ),
        # a message stating health information teaches no product (issue 12 of the review:
        # "maternity cover" from a pregnancy, "critical illness cover" from a diagnosis)
        ("I was diagnosed with diabetes; what health insurance can I get?", "diabetes", []),
        ("من دیابت دارم و دو فرزند دارم، بیمه درمان می‌خواهم", "دیابت", []),
        ("我有糖尿病，想买重疾险", "糖尿病", []),
        ("I'm pregnant, does maternity cover start at once?", "pregnant", []),
    ],
)
def test_personal_data_never_reaches_a_put(human: str, secret: str, products: list[str]) -> None:
    candidates = extract_memory(round_of(human))
    plan = extract_and_plan(round_of(human), [], RULES)
    assert [i.key for i in plan.puts if i.kind is MemoryKind.FACTS] == [
        f"product:{s}" for s in products
    ]
    for item in plan.puts:
        assert secret not in item.value
        assert find_personal_data(f"{item.key} {item.value}") == []
    # every candidate is either written or counted as refused, never silently lost
    assert len(plan.puts) + sum(plan.refused.values()) == len(candidates)
    assert plan.refused == Counter()
    assert secret not in repr(plan)


def test_refusals_are_counted_by_the_plan() -> None:
    human = f"کد ملی من {NID} است. بیمه تکمیلی و بیمه عمر؟"
    tight = MemoryRules(max_value_chars=16)  # "life insurance" fits, the longer name does not
    plan = extract_and_plan(round_of(human), [], tight)
    assert [i.key for i in plan.puts] == [LANGUAGE_KEY, "product:life"]
    assert plan.refused == Counter({"too_long": 1})
    assert NID not in repr(plan)


def test_extract_and_plan_is_the_rules_plan_of_the_extraction() -> None:
    round_ = round_of("Dear team, I'm married; what about travel insurance?")
    existing = [profile(LANGUAGE_KEY, "en", Provenance("thread-1", "m-1", T0))]
    plan = extract_and_plan(round_, existing, RULES)
    assert plan == RULES.plan(existing, extract_memory(round_))
    assert LANGUAGE_KEY not in {i.key for i in plan.puts}  # unchanged: not rewritten


def test_extract_and_plan_merges_the_stored_household() -> None:
    earlier = Provenance("thread-1", "m-1", T0)
    existing = [profile(HOUSEHOLD_KEY, "2 children", earlier)]
    plan = extract_and_plan(round_of("my wife wants life insurance"), existing, RULES)
    household = [i for i in plan.puts if i.key == HOUSEHOLD_KEY]
    assert household == [profile(HOUSEHOLD_KEY, "married; 2 children")]
    # a round that says nothing new about the household writes nothing for it
    again = extract_and_plan(round_of("I have kids"), [household[0]], RULES)
    assert HOUSEHOLD_KEY not in {i.key for i in again.puts}


# --- properties ------------------------------------------------------------------------------

VALUES = {
    LANGUAGE_KEY: {"fa", "zh", "en"},
    FORMALITY_KEY: {"formal", "informal"},
}
FRAGMENTS = [
    "بیمه", "عمر", "تکمیلی", "دو", "فرزند", "دارم", "همسرم", "لطفا", "تو", "دوستم", "دیابت",
    "我", "有", "两", "个", "孩子", "太太", "重疾险", "您", "你", "啊", "糖尿病", "朋友",
    "I", "have", "two", "kids", "my", "wife", "travel", "insurance", "hey", "dental", "cover",
    "friend", NID, "4111 1111 1111 1111", "،", ",", "。", "?", " ", "\u200c", "۲", "ي", "ك",
]  # fmt: skip


@settings(max_examples=3 * settings().max_examples, deadline=None)  # 300 in dev
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=25).map(" ".join))
def test_any_message_gives_only_admissible_closed_vocabulary_items(human: str) -> None:
    items = extract_memory(round_of(human))
    assert len({(i.kind, i.key) for i in items}) == len(items)
    names = {p.key: p.name for p in PRODUCTS}
    for item in items:
        assert RULES.refusal(item) is None
        assert item.source == SOURCE
        if item.kind is MemoryKind.FACTS:
            assert names[item.key] == item.value
        elif item.key == HOUSEHOLD_KEY:
            assert merge_household(item.value, item.value) == item.value  # a known format
        else:
            assert item.value in VALUES[item.key]
    assert items == extract_memory(round_of(human))


# --- the factored patterns (issue 12) ---------------------------------------------------------

PHRASES = [
    *(p for product in PRODUCTS for p in (*product.en, *product.fa, *product.zh, *product.bare)),
    *(p.split()[0] for product in PRODUCTS for p in (*product.en, *product.fa) if " " in p),
    "dear sir", "could you please", "kind regards", "hey", "haha", "can u", "lol", "شما",
    "لطفا", "ممنون می شوم", "جناب", "تو", "مرسی", "您", "请问", "嘿", "咋", "insurances",
    "-", "x", "9", "ی", "ها", "\u200c", " ",
]  # fmt: skip
"""Every name the patterns know, first words of the longer ones, and what may touch them."""


def _plain_patterns() -> list[tuple[re.Pattern[str], re.Pattern[str]]]:
    """Each compiled pattern beside its plain form (every alternative with its own lookbehind)."""
    pairs = [
        (compiled, re.compile(extraction._product_pattern(product, factored=False)))
        for product, compiled in extraction._PRODUCT_RES
    ]
    pairs += [
        (compiled, re.compile(extraction._bare_pattern(product, factored=False)))
        for product, compiled in extraction._BARE_RES
    ]
    formal = (*extraction._FA_FORMAL, *extraction._ZH_FORMAL, *extraction._EN_FORMAL)
    informal = (*extraction._FA_INFORMAL, *extraction._ZH_INFORMAL, *extraction._EN_INFORMAL)
    pairs.append(
        (extraction._FORMAL_RE, re.compile(extraction._alternation(formal, factored=False)))
    )
    pairs.append(
        (extraction._INFORMAL_RE, re.compile(extraction._alternation(informal, factored=False)))
    )
    return pairs


PLAIN = _plain_patterns()


def test_the_patterns_are_factored() -> None:
    """Each run of alternatives that open with the same lookbehind shares one."""
    lookbehinds = (extraction._EN_BEFORE, extraction._FA_BEFORE)

    def count(pattern: re.Pattern[str]) -> int:
        return sum(pattern.pattern.count(b) for b in lookbehinds)

    assert all(count(compiled) <= count(plain) for compiled, plain in PLAIN)
    assert sum(map(count, (c for c, _ in PLAIN))) * 3 < sum(map(count, (p for _, p in PLAIN)))


@settings(max_examples=3 * settings().max_examples, deadline=None)
@given(st.lists(st.sampled_from(PHRASES), max_size=12).map(" ".join), st.booleans())
def test_a_factored_pattern_matches_what_its_plain_form_does(text: str, joined: bool) -> None:
    text = fold(text.replace(" ", "") if joined else text)
    for compiled, plain in PLAIN:
        assert [m.span() for m in compiled.finditer(text)] == [
            m.span() for m in plain.finditer(text)
        ], (plain.pattern[:80], text)


def products_by_pairs(text: str) -> list[str]:
    """``detect_products`` as it was: every bare topic checked against every product name
    (quadratic in the number of mentions; issue 6's review)."""
    low = fold(text)
    spans = [
        (m.start(), m.end(), product)
        for product, regex in extraction._PRODUCT_RES
        for m in regex.finditer(low)
        if m.end() > m.start()
    ]
    named = extraction._leftmost_longest(spans)
    if extraction._INSURANCE_CONTEXT_RE.search(low):
        bare = [
            (m.start(), m.end(), product)
            for product, regex in extraction._BARE_RES
            for m in regex.finditer(low)
        ]
        taken = [(start, end) for start, end, _ in named]
        named += [
            span
            for span in extraction._leftmost_longest(bare)
            if not any(span[0] < end and start < span[1] for start, end in taken)
        ]
    seen: dict[str, str] = {}
    for _, _, product in sorted(named, key=lambda s: (s[0], s[1])):
        seen.setdefault(product.slug, product.slug)
    return list(seen.values())


@settings(max_examples=3 * settings().max_examples, deadline=None)
@given(st.lists(st.sampled_from(PHRASES), max_size=12).map(" ".join), st.booleans())
def test_bare_topics_beside_names_are_found_as_by_every_pair(text: str, joined: bool) -> None:
    text = text.replace(" ", "") if joined else text
    assert slugs(text) == products_by_pairs(text)
