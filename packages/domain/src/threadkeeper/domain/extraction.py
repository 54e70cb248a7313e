"""Rule-based memory extraction: what threadkeeper may remember about a user from one round.

The default, offline extractor (ADR-0007, "user_id: long-term cross-thread memory"). After an
answered run it reads the *human* message of the round and proposes at most these items:

* profile ``language`` — ``fa`` | ``zh`` | ``en``, from the script of the message, only when
  one script clearly dominates (at least two thirds of the words, at least three letters);
* profile ``formality`` — ``formal`` | ``informal``, only on a clear majority of register
  signals (Persian شما / لطفاً / بفرمایید vs تو / مرسی / چطوری; Chinese 您 / 请问 vs 你 with a
  casual sentence-final particle; English "Dear" / "Could you please" vs "hey" / "thx");
* facts ``product:<slug>`` — insurance products the user asked about or mentioned, from a
  closed fa/zh/en lexicon (``PRODUCTS``); the value is the product's English name;
* profile ``household`` — household context the user volunteered about *themselves* (married
  or single, living alone, how many children), as a short normalized English summary such as
  ``married; 2 children``. Third-person statements, names, ages and health are never kept.

Nothing else is extracted: no free text of the message ever becomes a value, so every value
comes from a closed vocabulary and carries no personal data by construction. The memory rules
(``MemoryRules.plan``) still check every candidate.

That vocabulary is all that memory holds (``ALLOWED_KEYS``, ``canonical_value``): whatever
another extractor proposes (a chat model, ``app.memory.ModelExtractor``) goes through the same
admission as these items (``plan_round``), and any other key or value is refused and counted.

The assistant's answer is not read: what the assistant said is not something the user told us.

Text is folded before matching (:func:`threadkeeper.domain.text.fold`): NFKC, Arabic letter
variants to Persian (ي→ی, ك→ک, آ→ا ...), the half-space (ZWNJ) to a space, Arabic diacritics
and tatweel dropped, Persian and Arabic-Indic digits to ASCII, case-folded, whitespace
squeezed. The Persian phrases of the lexicons are folded the same way.

Pure domain code: standard library, ``threadkeeper.domain`` and ``langchain_core.messages``.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from langchain_core.messages import AIMessage, HumanMessage

from threadkeeper.domain.memory import (
    MemoryItem,
    MemoryKind,
    MemoryRules,
    MemoryWritePlan,
    Provenance,
    Refusal,
)
from threadkeeper.domain.pii import contains_health_data
from threadkeeper.domain.text import ARABIC_LETTER_CLASS, HAN_CLASS, fold

__all__ = [
    "ALLOWED_KEYS",
    "FORMALITIES",
    "FORMALITY_KEY",
    "HOUSEHOLD_KEY",
    "LANGUAGES",
    "LANGUAGE_KEY",
    "PRODUCTS",
    "PRODUCT_KEY_PREFIX",
    "Product",
    "RoundText",
    "canonical_household",
    "canonical_value",
    "detect_formality",
    "detect_household",
    "detect_language",
    "detect_products",
    "extract_and_plan",
    "extract_memory",
    "merge_household",
    "plan_round",
    "vocabulary_refusal",
]

LANGUAGE_KEY: Final = "language"
FORMALITY_KEY: Final = "formality"
HOUSEHOLD_KEY: Final = "household"
PRODUCT_KEY_PREFIX: Final = "product:"


@dataclass(frozen=True, slots=True)
class RoundText:
    """One answered round, as the extractor sees it."""

    thread_id: str
    message_id: str
    """The human message's id: the provenance of everything extracted from the round."""
    human: str
    answer: str
    at: datetime

    @classmethod
    def from_messages(
        cls, thread_id: str, human: HumanMessage, answer: AIMessage, at: datetime
    ) -> RoundText:
        """The round of ``human`` and its final ``answer`` (text content blocks only)."""
        if not human.id:
            raise ValueError("the human message has no id, so nothing could name its origin")
        return cls(thread_id, human.id, str(human.text), str(answer.text), at)


# ============================================================================================
# Matching
# ============================================================================================

# Arabic-script letters (Persian included), after folding.
_FA_LETTER: Final = f"[{ARABIC_LETTER_CLASS}]"
_FA_BEFORE: Final = rf"(?<!{_FA_LETTER})"
_FA_AFTER: Final = rf"(?!{_FA_LETTER})"
_EN_BEFORE: Final = r"(?<![a-z0-9])"
_EN_AFTER: Final = r"(?![a-z0-9])"


def _fa(phrase: str) -> str:
    """A Persian phrase as a pattern: a space may be absent, a space or a (folded) half-space.
    The phrase is folded like the text it is matched against (``آتش`` is ``اتش``)."""
    return r"\s*".join(re.escape(part) for part in fold(phrase).split())


def _en(phrase: str) -> str:
    """An English phrase as a pattern: spaces and hyphens are interchangeable."""
    words = (r"[\s-]?".join(re.escape(p) for p in word.split("-")) for word in phrase.split())
    return r"[\s-]+".join(words)


def _alternation(patterns: Iterable[str], *, factored: bool = True) -> str:
    """``(?:p1|p2|…)``, with each run of consecutive alternatives that open with the same
    word-boundary lookbehind (``_EN_BEFORE``, ``_FA_BEFORE``) sharing one: ``B(?:r1|r2)``.
    The two match alike (a lookbehind only looks at the position, and the alternatives keep
    their order), but the shared one is tried once per position instead of once per
    alternative and leaves the engine a literal prefix to skip by: 5–12× faster on a
    message (issue 12; ``factored=False`` gives the plain form the tests compare with)."""
    items = list(patterns)
    if not factored:
        return "(?:" + "|".join(items) + ")"
    parts: list[str] = []
    index = 0
    while index < len(items):
        lead = next((b for b in (_EN_BEFORE, _FA_BEFORE) if items[index].startswith(b)), None)
        if lead is None:
            parts.append(items[index])
            index += 1
            continue
        run: list[str] = []
        while index < len(items) and items[index].startswith(lead):
            run.append(items[index][len(lead) :])
            index += 1
        parts.append(lead + "(?:" + "|".join(run) + ")")
    return "(?:" + "|".join(parts) + ")"


# ============================================================================================
# Language
# ============================================================================================

_WORD_RUN: Final = re.compile(
    rf"(?P<fa>{_FA_LETTER}+)"
    rf"|(?P<zh>[{HAN_CLASS}])"
    r"|(?P<en>[a-z]+)"
    r"|(?P<other>[^\W\d_]+)"
)
# A Chinese word is 1.5-1.7 characters on average: a character weighs 0.6 of a word.
_HAN_WEIGHT: Final = 0.6
_MIN_LETTERS: Final = 3
_DOMINANCE: Final = 2 / 3


def detect_language(text: str) -> str | None:
    """``fa``, ``zh`` or ``en`` when one script clearly dominates ``text``; else ``None``.

    Words are counted per script (a Han character as 0.6 of a word); the dominant script must
    carry at least two thirds of them and at least three letters. Arabic script counts as
    Persian; any other script (Cyrillic, kana, accented Latin words ...) counts against
    certainty.
    """
    low = fold(text)
    weight = {"fa": 0.0, "zh": 0.0, "en": 0.0, "other": 0.0}
    letters = {"fa": 0, "zh": 0, "en": 0, "other": 0}
    for match in _WORD_RUN.finditer(low):
        script = match.lastgroup or "other"
        letters[script] += len(match.group())
        weight[script] += _HAN_WEIGHT if script == "zh" else 1.0
    total = sum(weight.values())
    if total == 0:
        return None
    best = max(("fa", "zh", "en"), key=lambda s: weight[s])
    if letters[best] < _MIN_LETTERS or weight[best] < _DOMINANCE * total:
        return None
    return best


# ============================================================================================
# Formality
# ============================================================================================

_FA_FORMAL: Final = (
    *(
        _FA_BEFORE + _fa(p) + _FA_AFTER
        for p in ("شما", "لطفا", "بفرمایید", "بفرمائید", "جنابعالی", "حضرتعالی", "سرکارعالی")
    ),
    *(
        _FA_BEFORE + _fa(p)
        for p in (
            "ممنون می شوم", "ممنون میشوم", "سپاسگزارم", "سپاسگذارم", "متشکرم", "خواهشمندم",
            "خواهشمند است", "سرکار خانم", "سرکار عالی", "جناب", "با احترام", "احتراما",
            "می فرمایید",
        )
    ),
)  # fmt: skip
_FA_INFORMAL: Final = tuple(
    _FA_BEFORE + _fa(p) + _FA_AFTER
    for p in (
        "تو", "مرسی", "چطوری", "دمت گرم", "داداش", "ایول", "میتونی", "میدونی", "بهت", "برات",
        "ازت",
    )
)  # fmt: skip
_ZH_FORMAL: Final = ("麻烦您", "您", "请问", "烦请", "敬请", "劳驾", "贵公司", "贵司", "此致")
_ZH_INFORMAL: Final = ("嘿", "嗨", "哈哈", "咋")
_ZH_YOU: Final = re.compile("你(?!们)")
_ZH_PARTICLE: Final = re.compile(r"[啊呀哈吧啦](?=\s*(?:[。！？!?，,~～….]|$))")
_EN_FORMAL: Final = (
    r"^dear" + _EN_AFTER,
    r"(?<![a-z])dear (?:sir|madam|sirs|team|support|customer|all|mr|mrs|ms|miss|dr)" + _EN_AFTER,
    *(
        _EN_BEFORE + _en(p) + _EN_AFTER
        for p in (
            "could you please", "would you please", "could you kindly", "would you kindly",
            "i would appreciate", "i would be grateful", "i'd be grateful", "kind regards",
            "kindest regards", "best regards", "warm regards", "yours sincerely",
            "yours faithfully", "sincerely", "to whom it may concern", "please advise",
            "thank you in advance", "i look forward to",
        )
    ),
)  # fmt: skip
_EN_INFORMAL: Final = (
    *(
        _EN_BEFORE + _en(p) + _EN_AFTER
        for p in (
            "hey", "hi there", "hiya", "thx", "thanx", "pls", "plz", "gonna", "wanna", "gotta",
            "lol", "lmao", "btw", "omg", "tbh", "idk", "cuz",
        )
    ),
    _EN_BEFORE + r"ha(?:ha)+" + _EN_AFTER,
    r"(?<![\w.'])u(?![\w.'])",  # "can u"
)  # fmt: skip

_FORMAL_RE: Final = re.compile(_alternation((*_FA_FORMAL, *_ZH_FORMAL, *_EN_FORMAL)))
_INFORMAL_RE: Final = re.compile(_alternation((*_FA_INFORMAL, *_ZH_INFORMAL, *_EN_INFORMAL)))


def detect_formality(text: str) -> str | None:
    """``formal`` or ``informal`` when the register signals of ``text`` clearly lean one way.

    Each signal counts once per occurrence; the side with strictly more wins, a tie (including
    none at all) gives ``None``. In Chinese, 你 is the ordinary "you": it is informal only with
    a casual sentence-final particle (啊 呀 哈 吧 啦).
    """
    low = fold(text)
    formal = sum(1 for _ in _FORMAL_RE.finditer(low))
    informal = sum(1 for _ in _INFORMAL_RE.finditer(low))
    if _ZH_YOU.search(low) and _ZH_PARTICLE.search(low):
        informal += 1
    if formal > informal:
        return "formal"
    if informal > formal:
        return "informal"
    return None


# ============================================================================================
# Products
# ============================================================================================


@dataclass(frozen=True, slots=True)
class Product:
    """One insurance product of the lexicon and the ways users name it.

    ``en``/``fa``/``zh`` are names that stand alone ("travel insurance", "بیمه مسافرتی",
    "旅游险"); a Persian name starting with "بیمه" also matches with the ezafe, plural or
    "بیمه‌نامه" ("بیمه‌ی عمر", "بیمه‌های درمانی", "بیمه‌نامه عمر"). ``bare`` names a topic
    ("dental", "دندانپزشکی", "牙科") that counts only when the same message talks about
    insurance (cover, policy, claim, بیمه, 保险, 理赔 ...).
    """

    slug: str
    name: str
    en: tuple[str, ...] = ()
    fa: tuple[str, ...] = ()
    zh: tuple[str, ...] = ()
    bare: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return PRODUCT_KEY_PREFIX + self.slug


# Slugs never hold a health word on their own ("product:cancer" would be refused as health by
# the memory rules): such topics are named with their product noun, "critical-illness-cover".
def _names(block: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in block.replace("\n", ",").split(",") if n.strip())


def _product(slug: str, name: str, **names: str) -> Product:
    return Product(slug, name, **{language: _names(block) for language, block in names.items()})


PRODUCTS: Final[tuple[Product, ...]] = (
    _product(
        "health",
        "health insurance",
        en="""health insurance, medical insurance, private medical insurance, health cover,
        health coverage, health plan, health policy, medical cover, medical plan""",
        fa="بیمه درمان, بیمه درمانی, بیمه سلامت, بیمه خدمات درمانی",
        zh="医疗保险, 医疗险, 健康险, 健康保险, 百万医疗, 住院医疗险",
    ),
    _product(
        "supplementary-health",
        "supplementary health insurance",
        en="""supplementary health insurance, supplemental health insurance,
        supplementary medical insurance, supplemental medical insurance,
        supplementary insurance, supplemental insurance, top-up health insurance,
        top-up health cover""",
        fa="""بیمه تکمیلی, بیمه درمان تکمیلی, بیمه تکمیل درمان, بیمه تکمیلی درمان,
        بیمه درمانی تکمیلی""",
        zh="补充医疗保险, 补充医疗险, 补充医疗",
    ),
    _product(
        "dental",
        "dental cover",
        en="dental insurance, dental cover, dental coverage, dental plan, dental policy",
        fa="بیمه دندانپزشکی, بیمه دندان",
        zh="牙科保险, 牙科险, 齿科保险, 齿科险, 口腔险, 口腔保险",
        bare="dental, dentist, orthodontics, دندان پزشک, ارتودنسی, 牙科, 齿科, 看牙, 洗牙",
    ),
    _product(
        "maternity",
        "maternity cover",
        en="""maternity insurance, maternity cover, maternity coverage, maternity benefit,
        maternity plan""",
        fa="بیمه زایمان",
        zh="生育险, 生育保险, 孕产险, 孕产保险, 母婴险, 母婴保险",
        bare="maternity, زایمان, 生育, 孕产",
    ),
    _product(
        "life",
        "life insurance",
        en="life insurance, life cover, life assurance, life policy, term life, whole life",
        fa="بیمه عمر, بیمه زندگی",
        zh="人寿保险, 寿险, 人寿险",
    ),
    _product(
        "car",
        "car insurance",
        en="""car insurance, auto insurance, motor insurance, vehicle insurance,
        automobile insurance, car cover, car policy, auto policy""",
        fa="بیمه خودرو, بیمه ماشین, بیمه اتومبیل",
        zh="车险, 汽车保险, 机动车保险, 车辆保险",
    ),
    _product(
        "car-body",
        "comprehensive car insurance",
        en="""comprehensive car insurance, comprehensive motor insurance,
        comprehensive auto insurance, collision insurance, collision coverage,
        own damage cover, own damage insurance""",
        fa="بیمه بدنه",
        zh="车损险, 车辆损失险, 车辆损失保险",
        bare="بدنه",
    ),
    _product(
        "car-third-party",
        "third-party car insurance",
        en="""third-party insurance, third-party car insurance, third-party motor insurance,
        third-party liability, third-party cover""",
        fa="بیمه شخص ثالث, بیمه ثالث",
        zh="交强险, 三者险, 第三者责任险, 第三者险",
        bare="third-party, شخص ثالث",
    ),
    _product(
        "travel",
        "travel insurance",
        en="""travel insurance, travel cover, travel policy, travel medical insurance,
        travel health insurance, trip insurance, schengen insurance, visa insurance""",
        fa="بیمه مسافرتی, بیمه مسافرت, بیمه سفر",
        zh="旅游保险, 旅游险, 旅行保险, 旅行险, 境外医疗险, 申根保险",
    ),
    _product(
        "home",
        "home insurance",
        en="""home insurance, house insurance, homeowners insurance, homeowner's insurance,
        home owners insurance, contents insurance, renters insurance, tenant insurance,
        buildings insurance, fire insurance""",
        fa="بیمه آتش سوزی, بیمه منزل, بیمه خانه, بیمه مسکن, بیمه منازل, بیمه زلزله",
        zh="家财险, 家庭财产保险, 家庭财产险, 房屋保险, 火灾保险, 火险",
    ),
    _product(
        "critical-illness-cover",
        "critical illness cover",
        en="""critical illness insurance, critical illness cover, critical illness policy,
        critical illness plan, dread disease insurance, serious illness cover""",
        fa="""بیمه بیماری های خاص, بیمه بیماری خاص, بیمه امراض خاص,
        بیمه بیماری های صعب العلاج""",
        zh="重疾险, 重疾保险, 重大疾病保险, 重大疾病险",
    ),
    _product(
        "cancer-cover",
        "cancer cover",
        en="cancer insurance, cancer cover, cancer policy, cancer plan",
        fa="بیمه سرطان",
        zh="防癌险, 防癌保险, 癌症险, 癌症保险",
    ),
    _product(
        "pet",
        "pet insurance",
        en="pet insurance, pet cover, pet health insurance, dog insurance, cat insurance",
        fa="بیمه حیوانات خانگی, بیمه حیوان خانگی, بیمه پت, بیمه سگ, بیمه گربه",
        zh="宠物保险, 宠物险",
    ),
    _product(
        "accident",
        "personal accident insurance",
        en="""personal accident insurance, personal accident cover, accident insurance,
        accident cover, accidental death""",
        fa="بیمه حوادث",
        zh="意外险, 意外保险, 意外伤害保险, 意外伤害险, 意外医疗险",
    ),
    _product(
        "income-protection",
        "income protection insurance",
        en="""income protection, disability insurance, disability income insurance,
        long-term disability insurance, short-term disability insurance""",
        fa="بیمه از کار افتادگی",
        zh="失能险, 失能保险, 失能收入损失保险",
    ),
    _product(
        "long-term-care",
        "long-term care insurance",
        en="long-term care insurance, long-term care cover",
        fa="بیمه مراقبت طولانی مدت",
        zh="长期护理险, 长期护理保险, 护理险, 护理保险",
    ),
    _product(
        "pension",
        "pension / annuity",
        en="pension plan, pension, annuity, retirement plan, retirement insurance",
        fa="بیمه بازنشستگی, بیمه مستمری",
        zh="养老保险, 养老险, 年金险, 年金保险",
    ),
)

_FA_INSURANCE_LEAD: Final = r"بیمه(?:\s*نامه)?(?:\s*(?:های|ها|ای|ی))?\s*"


def _product_pattern(product: Product, *, factored: bool = True) -> str:
    names: list[str] = []
    for phrase in product.en:
        names.append(_EN_BEFORE + _en(phrase) + r"(?:s|es)?" + _EN_AFTER)
    for phrase in product.fa:
        head, _, rest = phrase.partition(" ")
        body = _FA_INSURANCE_LEAD + _fa(rest) if head == "بیمه" else _fa(phrase)
        names.append(_FA_BEFORE + body)  # any suffix may follow: بیمه عمرم, بیمه تکمیلی‌ام
    names.extend(re.escape(phrase) for phrase in product.zh)
    return _alternation(names, factored=factored)


def _bare_pattern(product: Product, *, factored: bool = True) -> str:
    topics: list[str] = []
    for topic in product.bare:
        if topic.isascii():
            topics.append(_EN_BEFORE + _en(topic) + r"s?" + _EN_AFTER)
        elif re.search(_FA_LETTER, topic):
            topics.append(_FA_BEFORE + _fa(topic))
        else:
            topics.append(re.escape(topic))
    return _alternation(topics, factored=factored)


_PRODUCT_RES: Final = tuple(
    (product, re.compile(_product_pattern(product))) for product in PRODUCTS
)
_BARE_RES: Final = tuple(
    (product, re.compile(_bare_pattern(product))) for product in PRODUCTS if product.bare
)
_INSURANCE_CONTEXT_RE: Final = re.compile(
    _EN_BEFORE
    + r"(?:insur\w*|assurance|cover|covers|covered|coverage|polic(?:y|ies)|plans?|premiums?"
    + r"|claims?|quotes?|deductibles?|benefits?|reimburs\w*)"
    + _EN_AFTER
    + r"|بیمه|پوشش|خسارت|فرانشیز|غرامت"
    + r"|保险|险|保障|保单|投保|理赔|保费|报销|赔付|承保"
)


def detect_products(text: str) -> list[Product]:
    """The products ``text`` names, in order of first mention, each once.

    Overlapping names resolve leftmost-longest: "بیمه درمان تکمیلی" is supplementary health
    insurance, not also health insurance; "pet health insurance" is pet insurance.
    """
    low = fold(text)
    spans: list[tuple[int, int, Product]] = []
    for product, regex in _PRODUCT_RES:
        spans.extend(
            (m.start(), m.end(), product) for m in regex.finditer(low) if m.end() > m.start()
        )
    named = _leftmost_longest(spans)
    if _BARE_RES and _INSURANCE_CONTEXT_RE.search(low):
        bare: list[tuple[int, int, Product]] = []
        for product, regex in _BARE_RES:
            bare.extend((m.start(), m.end(), product) for m in regex.finditer(low))
        # ``named`` is sorted and its spans do not overlap, so their ends rise with their
        # starts: a bare span overlaps one of them iff it overlaps the last one starting
        # before its end (bisection; a scan of every name per topic was quadratic, issue 6)
        starts = [start for start, _, _ in named]
        ends = [end for _, end, _ in named]
        named += [
            span
            for span in _leftmost_longest(bare)
            if (last := bisect_left(starts, span[1]) - 1) < 0 or ends[last] <= span[0]
        ]
    seen: dict[str, Product] = {}
    for _, _, product in sorted(named, key=lambda s: (s[0], s[1])):
        seen.setdefault(product.slug, product)
    return list(seen.values())


def _leftmost_longest(
    spans: list[tuple[int, int, Product]],
) -> list[tuple[int, int, Product]]:
    kept: list[tuple[int, int, Product]] = []
    end_of_last = -1
    for span in sorted(spans, key=lambda s: (s[0], -s[1], s[2].slug)):
        if span[0] >= end_of_last:
            kept.append(span)
            end_of_last = span[1]
    return kept


# ============================================================================================
# Household
# ============================================================================================

_MARRIED: Final = "married"
_SINGLE: Final = "single"
_ALONE: Final = "lives alone"
_HAS_CHILDREN: Final = "has children"
_NO_CHILDREN: Final = "no children"
_MAX_CHILDREN: Final = 20

_EN_NUMBERS: Final = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10,
}  # fmt: skip
_FA_NUMBERS: Final = {
    "یک": 1, "یه": 1, "دو": 2, "سه": 3, "چهار": 4, "پنج": 5, "شش": 6, "شیش": 6, "هفت": 7,
    "هشت": 8,
}  # fmt: skip
_ZH_NUMBERS: Final = {
    "一": 1, "两": 2, "二": 2, "俩": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8,
    "九": 9, "十": 10,
}  # fmt: skip

# --- English ---
_EN_NUM: Final = r"(?:\d{1,2}|" + "|".join(_EN_NUMBERS) + ")"
_EN_CHILD: Final = r"(?:kids?|children|child|sons?|daughters?|boys?|girls?)"
_EN_ADJ: Final = r"(?:(?:young|little|small|grown(?:-up)?|teenage|adult|lovely|wonderful)\s+)?"
_EN_ITEM: Final = rf"(?P<n>{_EN_NUM})\s+{_EN_ADJ}{_EN_CHILD}{_EN_AFTER}"
_EN_ITEM_RE: Final = re.compile(_EN_BEFORE + _EN_ITEM)
_EN_I_HAVE: Final = r"(?<![a-z'])(?:i|we)(?:\s+have|'ve|\s+have\s+got|'ve\s+got)\s+"
# A first-person clause the next verb shares its subject with: "I am married and have two
# kids", "we live in Shiraz and have a son". The clause may not change subject ("I think
# they are married and have …", "I know my friends …") nor pass another "and".
_EN_NOT_IN_LEAD: Final = (
    r"(?:he|she|they|you|it|who|that|which|and|or|but|is|are|was|were|has|have|had|think|thinks"
    r"|know|knows|believe|heard|hear|said|say|says|guess|hope|wish|friend|friends|sister"
    r"|brother|mother|mom|father|dad|parents|neighbor|neighbour|colleague|cousin)"
)
_EN_LEAD: Final = (
    rf"(?<![a-z'])(?:i|we)(?:'m|'re|\s+(?!{_EN_NOT_IN_LEAD}(?![a-z']))[a-z'-]+)"
    rf"(?:,?\s+(?!{_EN_NOT_IN_LEAD}(?![a-z']))[a-z0-9'-]+){{0,5}}?"
)
_EN_AND_HAVE: Final = rf"{_EN_LEAD},?\s+and\s+(?:also\s+)?(?:have|'ve)(?:\s+got)?\s+"
_EN_ITEMS: Final = (
    _EN_ITEM.replace("?P<n>", "") + rf"(?:\s*(?:,|and|&)\s*{_EN_ITEM.replace('?P<n>', '')})*"
)
_EN_COUNT_RES: Final = (
    # "I have two kids", "we've got a son and two daughters"
    re.compile(_EN_I_HAVE + rf"(?P<items>{_EN_ITEMS})"),
    # "I am married and have two kids" (only the items after "have" are counted)
    re.compile(_EN_AND_HAVE + rf"(?P<items>{_EN_ITEMS})"),
    # "my two kids"
    re.compile(rf"(?<![a-z])my\s+{_EN_ITEM.replace('?P<n>', '')}"),
)
_EN_HAS_CHILDREN_RE: Final = re.compile(
    rf"(?<![a-z])(?:my\s+(?:kids|children|child|son|sons|daughter|daughters)"
    rf"|{_EN_I_HAVE}(?:kids|children)|{_EN_AND_HAVE}(?:kids|children)){_EN_AFTER}"
)
_EN_NO_CHILDREN_RE: Final = re.compile(
    rf"(?<![a-z'])(?:(?:i|we)(?:\s+have|'ve)(?:\s+got)?\s+no\s+(?:kids|children)"
    rf"|(?:i|we)\s+(?:don't|do\s+not)\s+have\s+(?:any\s+)?(?:kids|children)"
    rf"|{_EN_AND_HAVE}no\s+(?:kids|children)"
    rf"|{_EN_LEAD},?\s+and\s+(?:don't|do\s+not)\s+have\s+(?:any\s+)?(?:kids|children))"
    rf"{_EN_AFTER}"
)
_EN_I_AM: Final = r"(?<![a-z'])(?:i\s+am|i'm|im)\s+"
_EN_MARRIED_RE: Final = re.compile(
    rf"(?:{_EN_I_AM}(?:(?:happily|recently|newly|already)\s+)?married"
    rf"|(?<![a-z'])we(?:\s+are|'re|\s+got)\s+married"
    rf"|(?<![a-z'])my\s+(?:wife|husband|spouse|hubby)){_EN_AFTER}"
)
_EN_SINGLE_RE: Final = re.compile(rf"{_EN_I_AM}(?:not\s+married|unmarried|single){_EN_AFTER}")
_EN_ALONE_RE: Final = re.compile(
    r"(?<![a-z'])i(?:\s+live|\s+am\s+living|'m\s+living)\s+(?:alone|by\s+myself|on\s+my\s+own)"
    + _EN_AFTER
)

# --- Persian ---
_FA_NUM: Final = r"(?:\d{1,2}|" + "|".join(_FA_NUMBERS) + ")"
_FA_CHILD: Final = r"(?:فرزند|بچه|پسر|دختر)(?:ان|\s*ها|\s*های)?"
_FA_ITEM: Final = rf"{_FA_BEFORE}(?P<n>{_FA_NUM})\s*(?:تا\s*)?{_FA_CHILD}{_FA_AFTER}"
# inside a matched statement: the count and the noun, whatever suffix follows
_FA_ITEM_RE: Final = re.compile(rf"{_FA_BEFORE}(?P<n>{_FA_NUM})\s*(?:تا\s*)?(?:فرزند|بچه|پسر|دختر)")
_FA_HAVE: Final = rf"{_FA_BEFORE}(?:دارم|داریم){_FA_AFTER}"
_FA_ITEMS: Final = (
    _FA_ITEM.replace("?P<n>", "") + rf"(?:\s*(?:و|،|,)\s*{_FA_ITEM.replace('?P<n>', '')})*"
)
# The verb comes after the list, so a list that never reaches it must not be read again from
# each of its items ("دو بچه و " x 2,000 took a second: issue 6's review). The list is taken
# whole and once (atomic), and the verb is optional: a list without it still matches, so that
# finditer goes on after the list rather than from its next character; only a match holding
# the verb is a statement (``_STATEMENT_GROUP``). The spans are those of the plain form
# "items, up to two words, the verb" (``tests/unit/domain/test_extraction_household.py``).
_FA_LIST_HAVE: Final = rf"(?>{_FA_ITEMS})(?P<verb>(?:\s+{_FA_LETTER}+){{0,2}}?\s+{_FA_HAVE})?"
_STATEMENT_GROUP: Final = "verb"
"""A statement pattern with this group matches a statement only when the group took part."""
_FA_COUNT_RES: Final = (
    # "دو فرزند دارم", "یک پسر و یک دختر داریم", "دو تا بچه‌ی کوچک دارم"
    re.compile(_FA_LIST_HAVE),
    # "دو فرزندم", "۲ تا بچه‌هام" (my two children)
    re.compile(
        rf"{_FA_BEFORE}{_FA_NUM}\s*(?:تا\s*)?(?:فرزندان|فرزند|بچه|پسر|دختر)(?:\s*(?:ها|های))?"
        rf"\s*(?:م|ام|یم)(?:و|را|رو)?{_FA_AFTER}"
    ),
)
_FA_HAS_CHILDREN_RE: Final = re.compile(
    _FA_BEFORE
    + r"(?:(?:بچه|فرزند)\s*(?:دارم|داریم)|فرزندانم|فرزندم|بچه\s*(?:ها|های)\s*(?:م|یم)"
    + r"|پسرم|دخترم|پسرهایم|دخترهایم|پسرام|دخترام)"
    + r"(?:و|را|رو)?"
    + _FA_AFTER
)
_FA_NO_CHILDREN_RE: Final = re.compile(rf"{_FA_BEFORE}(?:بچه|فرزند)\s*(?:ندارم|نداریم){_FA_AFTER}")
_FA_MARRIED_RE: Final = re.compile(
    _FA_BEFORE
    + r"(?:متاهل\s*(?:هستم|هستیم|ام|ایم|م)"
    + r"|(?:همسرم|شوهرم|خانمم)(?:و|را|رو)?"
    + r"|(?:همسر|شوهر)\s*من"
    + r"|ازدواج\s*(?:کردم|کردیم|کرده\s*ام|کرده\s*ایم))"
    + _FA_AFTER
)
_FA_SINGLE_RE: Final = re.compile(
    _FA_BEFORE + r"(?:مجرد\s*(?:هستم|ام|م)|متاهل\s*نیستم|ازدواج\s*(?:نکردم|نکرده\s*ام))" + _FA_AFTER
)
_FA_ALONE_RE: Final = re.compile(_FA_BEFORE + r"تنها(?:یی)?\s*زندگی\s*می\s*کنم" + _FA_AFTER)

# --- Chinese ---
_ZH_NUM: Final = r"(?:\d{1,2}|[" + "".join(_ZH_NUMBERS) + "])"
# 儿/女 alone only as in 一儿一女; never the start of 女朋友, 儿童 ...
_ZH_CHILD: Final = (
    r"(?:孩子|小孩|儿子|女儿|宝宝|男孩|女孩|娃"
    rf"|[儿女](?=$|{_ZH_NUM}|[和、，,。！!？?；;的都也\s]))"
)
_ZH_ITEM: Final = rf"(?:(?P<n>{_ZH_NUM})(?:个)?|个){_ZH_CHILD}"
_ZH_ITEM_RE: Final = re.compile(_ZH_ITEM)
# A first-person statement whose subject the next clause shares: "我结婚了，有两个孩子",
# "我已婚并且有一个儿子" (never "我朋友结婚了，有…": the statement must be the speaker's).
_ZH_LEAD: Final = (
    r"我(?:们)?(?:(?:已经|已|早就|去年|前年|刚刚|刚)?(?:结婚|结了婚|成家)了?|已婚|离婚了"
    r"|(?:是|还是)?单身|(?:是)?(?:自己)?一个人住)"
    r"[，,、\s]*(?:(?:并且|而且|并|也|还|现在|目前)[，,、\s]*)*"
)
_ZH_ITEMS: Final = (
    rf"{_ZH_ITEM.replace('?P<n>', '')}(?:(?:和|、|，|,|还有)?{_ZH_ITEM.replace('?P<n>', '')})*"
)
_ZH_COUNT_RES: Final = (
    # "我有两个孩子", "我们有一儿一女", "我家有一个儿子和一个女儿"
    re.compile(rf"我(?:们|们家|家)?有(?P<items>{_ZH_ITEMS})"),
    # "我结婚了，有三个孩子"
    re.compile(rf"{_ZH_LEAD}有(?P<items>{_ZH_ITEMS})"),
    # "我的两个孩子", "我两个孩子"
    re.compile(rf"我(?:的|家)?{_ZH_ITEM.replace('?P<n>', '').replace('|个', '')}"),
)
_ZH_HAS_CHILDREN_RE: Final = re.compile(
    rf"我(?:们|们家|家)?有(?:孩子|小孩)|我(?:的|家)?(?:孩子|小孩|儿子|女儿)|{_ZH_LEAD}有(?:孩子|小孩)"
)
_ZH_NO_CHILDREN_RE: Final = re.compile(
    rf"我(?:们)?(?:还)?(?:没有|没)(?:孩子|小孩)|{_ZH_LEAD}(?:还)?(?:没有|没)(?:孩子|小孩)"
)
_ZH_SPOUSE: Final = r"(?:太太|老婆|先生|老公|丈夫|妻子|爱人|媳妇)"
_ZH_MARRIED_RE: Final = re.compile(
    rf"我(?:已经|已)结婚|我结婚了|我已婚|我的?{_ZH_SPOUSE}|我和我?的?{_ZH_SPOUSE}|我们夫妻|我们两口子"
)
_ZH_SINGLE_RE: Final = re.compile(r"我(?:还)?(?:没有|没|未)结婚|我未婚|我(?:是|还是)?单身")
_ZH_ALONE_RE: Final = re.compile(r"我(?:是)?(?:自己)?一个人住|我独居|我一个人生活")

_COUNT_RULES: Final = (
    (_EN_COUNT_RES, _EN_ITEM_RE, _EN_NUMBERS),
    (_FA_COUNT_RES, _FA_ITEM_RE, _FA_NUMBERS),
    (_ZH_COUNT_RES, _ZH_ITEM_RE, _ZH_NUMBERS),
)


def _number(word: str, names: dict[str, int]) -> int:
    return int(word) if word.isdigit() else names.get(word, 1)


def _child_counts(low: str) -> set[int]:
    counts: set[int] = set()
    for statements, item, names in _COUNT_RULES:
        for statement in statements:
            for match in statement.finditer(low):
                if _STATEMENT_GROUP in statement.groupindex and not match.group(_STATEMENT_GROUP):
                    continue  # a list of children without the verb that makes it a statement
                # only the listed items count, not a number in the clause before them
                items = match.group("items") if "items" in statement.groupindex else None
                total = sum(
                    _number(m.group("n"), names) if m.group("n") else 1
                    for m in item.finditer(items if items is not None else match.group())
                )
                if 0 < total <= _MAX_CHILDREN:
                    counts.add(total)
    return counts


def detect_household(text: str) -> str | None:
    """A short English summary of the household context ``text`` states in the first person.

    Parts, in this order and joined by "; ": ``married`` | ``single``; ``lives alone``;
    ``N children`` | ``1 child`` | ``has children`` | ``no children``. Contradicting
    statements drop the part (two different counts keep only ``has children``). Statements
    about someone else ("my friend has two kids", "دوستم دو بچه دارد", "我朋友有两个孩子")
    give nothing; health, names and ages are never part of the summary.
    """
    low = fold(text)
    married = any(r.search(low) for r in (_EN_MARRIED_RE, _FA_MARRIED_RE, _ZH_MARRIED_RE))
    single = any(r.search(low) for r in (_EN_SINGLE_RE, _FA_SINGLE_RE, _ZH_SINGLE_RE))
    alone = any(r.search(low) for r in (_EN_ALONE_RE, _FA_ALONE_RE, _ZH_ALONE_RE))
    counts = _child_counts(low)
    has = bool(counts) or any(
        r.search(low) for r in (_EN_HAS_CHILDREN_RE, _FA_HAS_CHILDREN_RE, _ZH_HAS_CHILDREN_RE)
    )
    none = any(r.search(low) for r in (_EN_NO_CHILDREN_RE, _FA_NO_CHILDREN_RE, _ZH_NO_CHILDREN_RE))
    parts: list[str] = []
    if married != single:
        parts.append(_MARRIED if married else _SINGLE)
    if alone:
        parts.append(_ALONE)
    if has and not none:
        parts.append(_children(counts.pop()) if len(counts) == 1 else _HAS_CHILDREN)
    elif none and not has:
        parts.append(_NO_CHILDREN)
    return "; ".join(parts) or None


def _children(count: int) -> str:
    return "1 child" if count == 1 else f"{count} children"


_CHILDREN_PART: Final = re.compile(r"(?:1 child|\d+ children|has children|no children)")


def merge_household(stored: str, new: str) -> str:
    """``new`` over ``stored``, part by part: a round that only mentions a spouse keeps the
    children already known. ``has children`` does not replace a known count. A stored value
    this module did not write (an unknown part) is replaced whole."""

    def parts(value: str) -> dict[str, str] | None:
        slots: dict[str, str] = {}
        for part in (p.strip() for p in value.split(";")):
            if part in (_MARRIED, _SINGLE):
                slots["marital"] = part
            elif part == _ALONE:
                slots["living"] = part
            elif _CHILDREN_PART.fullmatch(part):
                slots["children"] = part
            else:
                return None
        return slots

    old, fresh = parts(stored), parts(new)
    if old is None or fresh is None:
        return new
    if fresh.get("children") == _HAS_CHILDREN and old.get("children") not in (
        None,
        _NO_CHILDREN,
    ):
        del fresh["children"]
    merged = {**old, **fresh}
    return "; ".join(merged[slot] for slot in ("marital", "living", "children") if slot in merged)


# ============================================================================================
# Entry points
# ============================================================================================


def extract_memory(round_: RoundText) -> list[MemoryItem]:
    """What may be remembered from ``round_``: language, formality, household (profile) and the
    products named (facts), all from the human message, each with the round's provenance.

    A message that states health information (``pii.contains_health_data``: a pregnancy, a
    diagnosis, a condition, a medication ...) teaches no product: "I am pregnant, is maternity
    covered?" must not leave "maternity cover" behind, nor a diagnosis "cancer cover"."""
    source = Provenance(round_.thread_id, round_.message_id, round_.at)
    items: list[MemoryItem] = []
    profile = (
        (LANGUAGE_KEY, detect_language(round_.human)),
        (FORMALITY_KEY, detect_formality(round_.human)),
        (HOUSEHOLD_KEY, detect_household(round_.human)),
    )
    for key, value in profile:
        if value is not None:
            items.append(MemoryItem(MemoryKind.PROFILE, key, value, source))
    if not contains_health_data(round_.human):
        items.extend(
            MemoryItem(MemoryKind.FACTS, product.key, product.name, source)
            for product in detect_products(round_.human)
        )
    return items


# ============================================================================================
# What memory holds: the rule extractor's vocabulary, for every extractor
# ============================================================================================

LANGUAGES: Final = ("fa", "zh", "en")
FORMALITIES: Final = ("formal", "informal")
ALLOWED_KEYS: Final[frozenset[tuple[MemoryKind, str]]] = frozenset(
    {
        (MemoryKind.PROFILE, LANGUAGE_KEY),
        (MemoryKind.PROFILE, FORMALITY_KEY),
        (MemoryKind.PROFILE, HOUSEHOLD_KEY),
        *((MemoryKind.FACTS, product.key) for product in PRODUCTS),
    }
)
"""The (kind, key) pairs the rule extractor writes, and so all that memory holds: whatever
another extractor (a model) proposes under any other key is refused (``key_not_allowed``)."""
_PRODUCT_NAMES: Final = {
    product.key: {" ".join(name.split()): product.name for name in (product.name, *product.en)}
    for product in PRODUCTS
}
_HOUSEHOLD_SLOTS: Final = (
    ("marital", re.compile(f"{_MARRIED}|{_SINGLE}")),
    ("living", re.compile(_ALONE)),
    ("children", re.compile(r"1 child|(?:[2-9]|1[0-9]|20) children|has children|no children")),
)


def canonical_household(value: str) -> str | None:
    """``value`` as the rule extractor writes a household summary (``detect_household``): its
    parts in order (marital, living, children), each at most once, joined by "; " — or
    ``None`` when ``value`` is not such a summary."""
    parts = [" ".join(p.split()) for p in value.casefold().split(";")]
    out: list[str] = []
    slots = iter(_HOUSEHOLD_SLOTS)
    for part in parts:
        for _, pattern in slots:
            if pattern.fullmatch(part):
                out.append(part)
                break
        else:
            return None
    return "; ".join(out) or None


def canonical_value(kind: MemoryKind, key: str, value: str) -> str | None:
    """``value`` as the rule extractor would write it under ``(kind, key)``, or ``None`` when
    it is not one of that key's values (or the key is not an allowed one).

    Case and spacing do not matter. ``language``: fa, zh, en; ``formality``: formal,
    informal; ``household``: ``canonical_household``; ``product:<slug>``: the product's name
    (``Product.name``) or one of its English names (``Product.en``), written as its name."""
    if (kind, key) not in ALLOWED_KEYS:
        return None
    folded = " ".join(value.split()).casefold()
    if key == LANGUAGE_KEY:
        return folded if folded in LANGUAGES else None
    if key == FORMALITY_KEY:
        return folded if folded in FORMALITIES else None
    if key == HOUSEHOLD_KEY:
        return canonical_household(folded)
    return _PRODUCT_NAMES[key].get(folded)


def vocabulary_refusal(item: MemoryItem) -> str | None:
    """Why ``item`` is outside the vocabulary (``key_not_allowed``, ``value_not_allowed``), or
    ``None``. Rule-extracted items are always inside it."""
    if (item.kind, item.key) not in ALLOWED_KEYS:
        return Refusal.KEY_NOT_ALLOWED.value
    if canonical_value(item.kind, item.key, item.value) != item.value:
        return Refusal.VALUE_NOT_ALLOWED.value
    return None


def _with_value(item: MemoryItem, value: str) -> MemoryItem:
    return MemoryItem(item.kind, item.key, value, item.source)


def plan_round(
    round_: RoundText,
    existing: Sequence[MemoryItem],
    candidates: Iterable[MemoryItem],
    rules: MemoryRules,
) -> MemoryWritePlan:
    """The write plan of what an extractor proposes from ``round_``, whoever the extractor is
    (the rules of this module, a chat model): one admission for all.

    Each candidate is first written as the vocabulary spells it (``canonical_value``), then
    refused, and counted by reason, if ``rules`` refuse it (personal data, an instruction,
    bounds, provenance: ``MemoryRules.refusal``), if it is outside the vocabulary
    (``vocabulary_refusal``), or if it is a product interest and the round's human message
    states health information (``health_context``: no product is learnt from a pregnancy or
    a diagnosis). A household candidate is merged into the stored summary
    (``merge_household``), so one round's partial statement does not erase what an earlier
    one said. The rest is ``rules.plan(existing, admitted)``, its refusals added to these."""
    stored = next(
        (i for i in existing if i.kind is MemoryKind.PROFILE and i.key == HOUSEHOLD_KEY), None
    )
    health: bool | None = None  # the human message is read only when a fact is proposed
    refused: Counter[str] = Counter()
    admitted: list[MemoryItem] = []
    for candidate in candidates:
        value = canonical_value(candidate.kind, candidate.key, candidate.value)
        item = candidate if value is None else _with_value(candidate, value)
        reason = rules.refusal(item) or vocabulary_refusal(item)
        if reason is None and item.kind is MemoryKind.FACTS:
            if health is None:
                health = contains_health_data(round_.human)
            if health:
                reason = Refusal.HEALTH_CONTEXT.value
        if reason is not None:
            refused[reason] += 1
            continue
        if stored is not None and item.key == HOUSEHOLD_KEY:
            item = _with_value(item, merge_household(stored.value, item.value))
        admitted.append(item)
    plan = rules.plan(existing, admitted)
    return MemoryWritePlan(plan.puts, plan.deletes, plan.refused + refused)


def extract_and_plan(
    round_: RoundText, existing: Sequence[MemoryItem], rules: MemoryRules
) -> MemoryWritePlan:
    """``plan_round(round_, existing, extract_memory(round_), rules)``: the rule extractor."""
    return plan_round(round_, existing, extract_memory(round_), rules)
