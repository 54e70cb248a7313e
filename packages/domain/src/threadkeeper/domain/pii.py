"""Personal data that must never be remembered: national IDs, payment details, health; and who
a person is and how to reach them.

This is the pure detector the memory rules call on every candidate (see ``memory``). It reports
*where* personal data is (kind and span), never *what* it is: a hit holds no copy of the text.
``find_personal_data`` finds the checked numbers and health information below;
``find_identifying_data`` finds names, e-mail addresses, phone numbers, dates of birth,
addresses, and national, passport and policy numbers, strictly, for short values such as a
remembered item (its section says what counts); ``contains_health_data`` says whether a text
states health information (the extractor learns no product from such a message).

Checks (details, decisions and known limits in ``docs/pii.md``):

* Iranian national ID (کد ملی): 10 digits, mod-11 check digit, computed here (stdnum has none).
* Chinese resident ID (居民身份证): ``stdnum.cn.ric`` (birth date, place code, checksum).
* Payment card: 13-19 digits, ``stdnum.luhn``.
* IBAN: ``stdnum.iban``; the Iranian Sheba (``IR`` + 24 digits), which stdnum's IBAN registry
  lacks, by its ISO 7064 mod 97-10 check (``stdnum.iso7064.mod_97_10``).
* Health: a lexicon of conditions, symptoms, treatments, medications, pregnancy, disability
  and mental health in English, Persian and Chinese, with insurance *product* names excluded.

Persian (U+06F0-06F9), Arabic-Indic (U+0660-0669) and full-width digits count as digits. All
folding is a same-length ``str.translate``, so every span points into the original text.

The domain layer: standard library and ``stdnum`` only.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from stdnum import iban as _iban
from stdnum import luhn as _luhn
from stdnum.cn import ric as _ric
from stdnum.iso7064 import mod_97_10 as _mod_97_10

__all__ = [
    "PersonalDataHit",
    "PersonalDataKind",
    "contains_health_data",
    "contains_personal_data",
    "find_identifying_data",
    "find_personal_data",
    "is_valid_iranian_national_id",
    "normalize_digits",
]


class PersonalDataKind(enum.StrEnum):
    IRANIAN_NATIONAL_ID = "iranian_national_id"
    CHINESE_RESIDENT_ID = "chinese_resident_id"
    PAYMENT_CARD = "payment_card"
    IBAN = "iban"
    HEALTH = "health"
    # who a person is and how to reach them (``find_identifying_data``)
    NAME = "name"
    EMAIL = "email"
    PHONE = "phone"
    DATE_OF_BIRTH = "date_of_birth"
    ADDRESS = "address"
    NATIONAL_ID = "national_id"
    """An ID number introduced as one (national ID, 身份证, کد ملی) that fails its check."""
    PASSPORT = "passport"
    POLICY_NUMBER = "policy_number"


@dataclass(frozen=True, slots=True)
class PersonalDataHit:
    """One finding: its kind and its span ``[start, end)`` in the original text.

    Deliberately holds no copy of the matched value, so a hit can be logged or counted safely.
    """

    kind: PersonalDataKind
    start: int
    end: int


# ============================================================================================
# Folding (always same length, so spans stay valid)
# ============================================================================================

_DIGIT_FOLD: Final[dict[int, int]] = {
    **{0x06F0 + i: 0x30 + i for i in range(10)},  # Persian ۰-۹
    **{0x0660 + i: 0x30 + i for i in range(10)},  # Arabic-Indic ٠-٩
    **{0xFF10 + i: 0x30 + i for i in range(10)},  # full-width ０-９
}

# What every check sees: digits as above, full-width ASCII as ASCII, Persian letter variants
# unified, the Persian half-space (ZWNJ) and odd spaces as a space, dashes as "-", and ASCII
# letters in lower case (acronyms, which are case-sensitive, are looked up in the original).
_FOLD: Final[dict[int, int]] = {
    **{c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)},  # full-width ！-～ -> ASCII
    **{c: c + 0x20 for c in range(0x41, 0x5B)},  # A-Z -> a-z
    **{c: c - 0xFEE0 + 0x20 for c in range(0xFF21, 0xFF3B)},  # full-width Ａ-Ｚ -> a-z
    **_DIGIT_FOLD,
    0x064A: 0x06CC,  # Arabic yeh ي -> Persian yeh ی
    0x0649: 0x06CC,  # alef maksura ى -> ی
    0x0643: 0x06A9,  # Arabic kaf ك -> Persian kaf ک
    0x06C0: 0x0647,  # heh with yeh above ۀ -> ه
    0x0629: 0x0647,  # teh marbuta ة -> ه
    0x200C: 0x20,  # ZWNJ (Persian half-space) -> space
    0x200D: 0x20,  # ZWJ
    0x00A0: 0x20,  # no-break space
    0x2007: 0x20,  # figure space
    0x202F: 0x20,  # narrow no-break space
    0x3000: 0x20,  # ideographic space
    0x2010: 0x2D,  # hyphen
    0x2011: 0x2D,  # non-breaking hyphen
    0x2012: 0x2D,  # figure dash
    0x2013: 0x2D,  # en dash
    0x2019: 0x27,  # right single quotation mark -> apostrophe
}


def normalize_digits(text: str) -> str:
    """Persian, Arabic-Indic and full-width digits to ASCII; the result has the same length."""
    return text.translate(_DIGIT_FOLD)


# str.translate looks every non-ASCII character up in the table, which is slow; substituting only
# the runs that change is several times faster on Persian and Chinese text.
_FOLD_RE: Final = re.compile(
    "[" + "".join(re.escape(chr(c)) for c in sorted(_FOLD) if c > 0x7F) + "]+"
)
_UPPER_RE: Final = re.compile(r"[A-Z]+")


def _fold_run(match: re.Match[str]) -> str:
    return match.group().translate(_FOLD)


def _lower_run(match: re.Match[str]) -> str:
    return match.group().lower()


def _fold(text: str) -> str:
    """``text.translate(_FOLD)``, faster."""
    if text.isascii():
        return text.lower()
    return _UPPER_RE.sub(_lower_run, _FOLD_RE.sub(_fold_run, text))


_ANY_DIGIT: Final = re.compile(r"[0-9]")

# ============================================================================================
# Numbers: Iranian national ID, Chinese RIC, payment card, Sheba written without "IR"
# ============================================================================================

# A maximal run of digit groups joined by single spaces or dashes, optionally ending in x (RIC).
# It must not touch a letter, a digit, a leading "+" (a phone number), nor continue as a longer
# number through ". / - ٫" (decimals, dates, ranges): then it is part of something else.
# (The left-hand checks follow the first digit, so the engine can skip to digits directly.)
_NUMBER_RE: Final = re.compile(
    r"[0-9](?<![0-9a-z+][0-9])(?<![0-9][ ./\u066b-][0-9])"
    r"[0-9]*(?:[ -][0-9]+)*(?:x(?![0-9a-z]))?"
    r"(?![0-9a-z])(?![ ./\u066b-][0-9])"
)

# A national ID is 10 digits contiguous or 3-6-1 (001-234567-8); other layouts of 10 digits (a
# 5-5 postcode, a 3-3-4 phone number) are not IDs.
_NATIONAL_ID_LAYOUT: Final = re.compile(r"[0-9]{10}|[0-9]{3}([ -])[0-9]{6}\1[0-9]")
# A card is contiguous, or starts with a group of 4 and keeps one separator (4-4-4-4, 4-6-5...).
_CARD_LAYOUT: Final = re.compile(r"[0-9]{13,19}|[0-9]{4}([ -])[0-9]{1,6}(?:\1[0-9]{1,6})*")

# One in ten random 10-digit strings passes the national-ID check, and one in ten 13-19 digit
# strings passes Luhn. So a number introduced as a postcode, phone, order or tracking number,
# or as an amount, is not reported as an ID or a card: the nearest keyword within
# _CONTEXT_WINDOW characters before the number decides (an ID/card keyword nearer than a
# postcode keyword wins back).
_CONTEXT_WINDOW: Final = 32
_NON_PERSONAL_NUMBER_WORDS: Final = (
    "postcode", "postal code", "post code", "zip", "zip code", "phone", "telephone", "tel",
    "mobile", "cell", "fax", "call", "whatsapp", "sms", "order", "tracking", "invoice",
    "reference", "ref", "ticket", "booking", "price", "amount", "premium", "cost", "budget",
    "limit",
    "کد پستی", "کدپستی", "تلفن", "موبایل", "تماس", "سفارش", "پیگیری", "رهگیری", "فاکتور",
    "مبلغ", "قیمت", "هزینه", "سقف", "حق بیمه",
    "邮编", "邮政编码", "电话", "手机", "订单", "单号", "快递", "发票", "金额", "保费", "价格",
    "费用",
)  # fmt: skip
_PERSONAL_NUMBER_WORDS: Final = (
    "national id", "national code", "national number", "melli", "card", "iban", "sheba",
    "account",
    "کد ملی", "کدملی", "شماره ملی", "کارت", "شبا", "حساب",
    "身份证", "卡号", "银行卡", "信用卡", "账号",
)  # fmt: skip


# An amount is not an ID or a card: "۱۵۰۰۰۰۰۰۰۰ ریال" (a round 10-digit amount in rials can pass
# the national-ID check), "$4111111111111111".
_CURRENCY_BEFORE: Final = frozenset("$€£¥﷼")
_CURRENCY_AFTER_RE: Final = re.compile(
    r" ?(?:ریال|تومان|دلار|یورو|rials?|tomans?|irr|irt|usd|eur|dollars?|euros?|yuan|rmb|cny"
    r"|元|块|美元|人民币)(?![a-z])"
)


def _keyword_pattern(words: Iterable[str]) -> str:
    # ASCII keywords need letter boundaries ("tel" is not in "hotel"); the others do not.
    return "|".join(
        rf"(?<![a-z]){re.escape(w)}(?![a-z])" if w.isascii() else re.escape(w) for w in words
    )


_NUMBER_CONTEXT_RE: Final = re.compile(
    f"(?P<personal>{_keyword_pattern(_PERSONAL_NUMBER_WORDS)})"
    f"|(?P<other>{_keyword_pattern(_NON_PERSONAL_NUMBER_WORDS)})"
)


def is_valid_iranian_national_id(value: str) -> bool:
    """Whether ``value`` is a valid Iranian national ID (کد ملی).

    Ten digits (ASCII, Persian, Arabic-Indic or full-width; dashes and spaces ignored). With
    ``d`` the digits, ``s = sum(d[i] * (10 - i) for i in 0..8) % 11`` and ``c = d[9]``: valid
    iff ``c == s`` when ``s < 2``, else ``c == 11 - s``. Ten equal digits are invalid.
    """
    digits = normalize_digits(value).strip().replace("-", "").replace(" ", "")
    if len(digits) != 10 or not (digits.isascii() and digits.isdigit()):
        return False
    if digits == digits[0] * 10:
        return False
    s = sum(int(digits[i]) * (10 - i) for i in range(9)) % 11
    check = int(digits[9])
    return check == s if s < 2 else check == 11 - s


def _is_card(digits: str) -> bool:
    return digits != digits[0] * len(digits) and _luhn.is_valid(digits)


def _is_sheba(compact: str) -> bool:
    """``IR`` + 2 check digits + 22 digits, ISO 7064 mod 97-10 (stdnum's registry has no IR)."""
    return (
        len(compact) == 26
        and compact[:2] == "IR"
        and compact[2:].isdigit()
        and _mod_97_10.is_valid(compact[4:] + compact[:4])
    )


# ISO 13616 letters as numbers (A = 10 ... Z = 35), for a quick mod-97 test before stdnum's.
_IBAN_LETTERS: Final = {ord(c): str(ord(c) - 55) for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"}


def _is_iban(compact: str) -> bool:
    compact = compact.upper()
    if int((compact[4:] + compact[:4]).translate(_IBAN_LETTERS)) % 97 != 1:
        return False  # cheap rejection; stdnum checks everything again below
    if compact.startswith("IR"):
        return _is_sheba(compact)
    return _iban.is_valid(compact)


def _iban_ends(low: str, start: int, first_end: int) -> list[int]:
    """Where an IBAN starting at ``start`` may end: after its first chunk of alphanumerics, or,
    when that chunk has 4 characters, after any further space-separated group of 4 (the last
    group may be shorter)."""
    ends = [first_end]
    if first_end - start != 4:
        return ends
    size = len(low)
    pos = first_end
    while pos + 1 < size and low[pos] == " " and pos - start < _IBAN_MAX + 8:
        nxt = pos + 1
        while nxt < size and nxt - pos <= 5 and _is_alnum_ascii(low[nxt]):
            nxt += 1
        if nxt == pos + 1 or nxt - pos > 5:
            break  # not a group of 1-4 alphanumerics
        ends.append(nxt)
        if nxt - pos < 5:
            break  # a short group ends the IBAN
        pos = nxt
    return ends


def _non_personal_context(low: str, start: int, end: int) -> bool:
    """Whether the number at ``[start, end)`` is an amount, or the nearest keyword before it
    says postcode/phone/order rather than ID/card."""
    if (start and low[start - 1] in _CURRENCY_BEFORE) or _CURRENCY_AFTER_RE.match(low, end):
        return True
    kind = None
    for keyword in _NUMBER_CONTEXT_RE.finditer(low, max(0, start - _CONTEXT_WINDOW), start):
        kind = keyword.lastgroup
    return kind == "other"


def _number_hits(low: str, hits: list[PersonalDataHit]) -> None:
    for match in _NUMBER_RE.finditer(low):
        raw = match.group()
        compact = raw.replace(" ", "").replace("-", "")
        start, end = match.span()
        size = len(compact)
        if size == 18 and _ric.is_valid(compact):
            hits.append(PersonalDataHit(PersonalDataKind.CHINESE_RESIDENT_ID, start, end))
        elif compact[-1] == "x":
            continue
        elif size == 10:
            if (
                _NATIONAL_ID_LAYOUT.fullmatch(raw)
                and is_valid_iranian_national_id(compact)
                and not _non_personal_context(low, start, end)
            ):
                hits.append(PersonalDataHit(PersonalDataKind.IRANIAN_NATIONAL_ID, start, end))
        elif 13 <= size <= 19:
            if (
                _CARD_LAYOUT.fullmatch(raw)
                and _is_card(compact)
                and not _non_personal_context(low, start, end)
            ):
                hits.append(PersonalDataHit(PersonalDataKind.PAYMENT_CARD, start, end))
        elif size == 24 and _is_sheba("IR" + compact):
            hits.append(PersonalDataHit(PersonalDataKind.IBAN, start, end))


# ============================================================================================
# IBAN (incl. Sheba): two letters, two digits, then alphanumerics, optionally in spaced groups
# ============================================================================================

# The two check digits, preceded by the two letters of the country code at a word start.
_IBAN_CHECK_RE: Final = re.compile(r"[0-9](?<=(?<![0-9a-z])[a-z]{2}[0-9])[0-9]")
_IBAN_MIN, _IBAN_MAX = 15, 34


def _is_alnum_ascii(char: str) -> bool:
    return char.isascii() and char.isalnum()


def _iban_hits(low: str, hits: list[PersonalDataHit]) -> None:
    size = len(low)
    resume = 0
    for head in _IBAN_CHECK_RE.finditer(low):
        start = head.start() - 2
        if start < resume:
            continue
        pos = head.end()
        while pos < size and _is_alnum_ascii(low[pos]):
            pos += 1
        # the longest valid candidate (what follows may be ordinary words)
        for end in reversed(_iban_ends(low, start, pos)):
            compact = low[start:end].replace(" ", "")
            if _IBAN_MIN <= len(compact) <= _IBAN_MAX and _is_iban(compact):
                hits.append(PersonalDataHit(PersonalDataKind.IBAN, start, end))
                resume = end
                break


# ============================================================================================
# Health lexicon
#
# Scope: what a person says about their own or their family's health - conditions, diagnoses,
# symptoms, treatments, medications, pregnancy, disability, mental health. Out of scope: the
# healthcare *setting* ("health", "hospital", "doctor", "clinic", "medicine" and "treatment"
# as categories, "hospitalization" as a coverage item, 健康, 医院, 住院, 医生, سلامت, بیمارستان,
# درمان, دکتر, پزشک), because that is how people ask about insurance products.
#
# Exclusions: insurance product names (*_PRODUCT_TOPICS followed by *_PRODUCT_NOUNS; Persian
# "بیمه" followed by a topic) and a few idioms (*_IDIOMS). A term that starts where an exclusion
# starts, or inside one, does not fire. Only products a healthy person buys are excluded
# (critical illness, cancer, disability income, mental-health cover, 重疾险, 防癌险,
# بیمه بیماری‌های خاص); "diabetes insurance" still fires.
# A condition named inside a coverage question ("does the plan cover cancer?") also fires: it
# can reveal a condition, and refusing to remember it only costs one memory.
#
# Word lists are comma-separated, one category per constant.
# English: ASCII word boundaries, case-insensitive, an optional plural "s"/"es" after every
#   term; a space in a term matches spaces or hyphens, a hyphen is optional.
# Persian: after folding (ي/ى->ی, ك->ک, ۀ->ه, ZWNJ->space) a space in a term matches any run of
#   spaces or none; up to two suffixes (_FA_SUFFIXES: ها، های، ام، اش، م، ی، ...) may follow,
#   then the word must end. _FA_EXACT terms take no suffix.
# Chinese: plain substrings.
# ============================================================================================


def _words(block: str) -> frozenset[str]:
    return frozenset(w.strip() for w in block.replace("\n", ",").split(",") if w.strip())


_EN_CONDITIONS: Final = _words("""
    diabetes, diabetic, prediabetes, prediabetic, cancer, cancerous, tumor, tumour, leukemia,
    leukaemia, lymphoma, melanoma, carcinoma, sarcoma, metastasis, metastases, metastatic,
    malignant, asthma, asthmatic, epilepsy, epileptic, seizure, heart attack, heart disease,
    heart failure, heart condition, cardiac arrest, arrhythmia, angina, hypertension,
    hypertensive, blood pressure, cholesterol, hiv, hepatitis, tuberculosis, cirrhosis,
    kidney disease, kidney failure, renal failure, liver disease, multiple sclerosis, parkinson,
    alzheimer, dementia, arthritis, rheumatoid, lupus, crohn, colitis, celiac, coeliac, thyroid,
    hypothyroidism, hyperthyroidism, osteoporosis, autism, autistic, dyslexia, dyslexic, anemia,
    anaemia, anemic, anaemic, hemophilia, haemophilia, sickle cell, thalassemia, thalassaemia,
    cystic fibrosis, down syndrome, obesity, obese, eczema, psoriasis, migraine, infertility,
    infertile, endometriosis, chlamydia, herpes, syphilis, gonorrhea, gonorrhoea, long covid,
    pneumonia, bronchitis, emphysema, sleep apnea, sleep apnoea, insomnia, allergy, allergies,
    allergic, illness, disease, sickness, terminally ill, chronically ill, concussion, fracture,
    fractured, injured, paralysis, paralyzed, paralysed, coma, kidney stone, gallstone,
    appendicitis, hernia, cataract, glaucoma, hearing impairment, visual impairment,
    vision impairment, cognitive impairment, had covid, has covid, have covid, got covid,
    caught covid, covid positive, tested positive, blood sugar, high sugar, sugar is high,
    sugar was high, sugar level, sugar problem
""")
_EN_SYMPTOMS: Final = _words("""
    symptom, headache, nausea, nauseous, vomiting, dizziness, dizzy, fever, cough, coughing,
    shortness of breath, chest pain, back pain, joint pain, neck pain, chronic pain, in pain,
    chronic fatigue, palpitations, numbness
""")
_EN_TREATMENTS: Final = _words("""
    diagnosis, diagnoses, diagnosed, prognosis, surgery, surgeries, operated on, chemotherapy,
    chemo, radiotherapy, radiation therapy, dialysis, transplant, physiotherapy,
    physical therapy, therapy, therapies, therapist, psychotherapy, rehab, rehabilitation,
    biopsy, biopsies, mri, ct scan, cat scan, mammogram, colonoscopy, ultrasound, blood test,
    under treatment, undergoing treatment, in treatment, hospitalized, hospitalised,
    admitted to hospital, intensive care, icu, prescribed, vaccinated, unvaccinated,
    hysterectomy, mastectomy, appendectomy, vasectomy, tonsillectomy, angioplasty, pacemaker,
    heart bypass, triple bypass, gastric bypass, ecg, ekg
""")
_EN_MEDICATIONS: Final = _words("""
    medication, insulin, metformin, antidepressant, antipsychotic, sertraline, fluoxetine,
    prozac, zoloft, lexapro, xanax, valium, diazepam, methadone, statin, warfarin, ozempic,
    semaglutide, levothyroxine, inhaler, antibiotic, opioid, morphine, painkiller, adderall,
    ritalin, antiretroviral, contraceptive, contraception, birth control
""")
_EN_PREGNANCY: Final = _words("""
    pregnant, pregnancy, pregnancies, miscarriage, miscarried, abortion, ivf,
    fertility treatment, trimester, prenatal, antenatal, postnatal, postpartum, c-section,
    caesarean, cesarean, expecting a baby, expecting a child, expecting twins, childbirth,
    giving birth
""")
_EN_DISABILITY: Final = _words("""
    disability, disabilities, wheelchair, visually impaired, hearing impaired, deaf, deafness,
    blindness, legally blind, hard of hearing, amputee, amputated, amputation, paraplegic,
    quadriplegic, hearing aid, learning difficulties
""")
_EN_MENTAL: Final = _words("""
    depression, depressed, depressive, anxiety, panic attack, bipolar, schizophrenia,
    schizophrenic, ptsd, ocd, adhd, anorexia, anorexic, bulimia, bulimic, eating disorder,
    personality disorder, mental disorder, suicidal, suicide, self-harm, psychiatrist,
    psychiatric, mental health, addiction, addicted, alcoholism
""")
_EN_TERMS: Final = (
    _EN_CONDITIONS
    | _EN_SYMPTOMS
    | _EN_TREATMENTS
    | _EN_MEDICATIONS
    | _EN_PREGNANCY
    | _EN_DISABILITY
    | _EN_MENTAL
)
# Case-sensitive: in lower case these are ordinary words ("aids", "std", "prep").
_EN_ACRONYMS: Final = frozenset(
    {"AIDS", "COPD", "PCOS", "STD", "STI", "PrEP", "BRCA", "has MS", "have MS", "had MS", "with MS"}
)
# Ambiguous words, only in a health sense: a lead word and what must follow it (a regular
# expression over lower-cased text; the lead word may itself also be a plain term).
_FAMILY: Final = _words("""
    son, daughter, child, kid, baby, mother, father, mom, mum, dad, wife, husband, brother,
    sister, partner, parent, grandmother, grandfather, user, customer
""")
_SOMEONES_CONDITION: Final = (
    r"[ -]+(?:an?[ -]+)?(?:pre-?existing|chronic|medical|health|skin)(?:[ -]+medical)?"
    r"[ -]+conditions?"
)
_SOMEONES_HISTORY: Final = r"[ -]+(?:medical|health)[ -]+(?:history|records?)"
_EN_PATTERNS: Final[tuple[tuple[str, str], ...]] = (
    # "stroke", not "stroke of luck", "brush stroke", "key stroke"
    ("stroke", r"(?<!brush stroke)(?<!key stroke)s?(?![ -]+of(?![a-z]))"),
    # "sick", "sick leave", not "sick of" / "sick and tired"
    ("sick", r"(?![ -]+(?:of|and[ -]+tired)(?![a-z]))"),
    # "disabled" of a person, not of a setting ("notifications are disabled")
    *(
        (adverb, r"[ -]+disabled")
        for adverb in _words("physically, mentally, severely, partially, permanently, registered")
    ),
    ("disabled", r"[ -]+(?:" + "|".join(sorted(_FAMILY)) + r"|person|people|children|veteran)s?"),
    ("i", r"(?:'?m|[ -]+am)[ -]+disabled"),
    *((pronoun, r"(?:'s|[ -]+is|[ -]+was)[ -]+disabled") for pronoun in ("he", "she")),
    *((relative, r"[ -]+(?:is|was)[ -]+disabled") for relative in _FAMILY),
    *((verb, r"[ -]+blind") for verb in ("is", "am", "are", "was", "went", "born")),
    ("broken", r"[ -]+(?:arm|leg|wrist|ankle|hip|bone|rib|neck|back|foot)s?"),
    # generic insurance vocabulary, only when it is someone's: "my pre-existing condition",
    # "she has a chronic condition", "her medical history", "mother's medical records"
    *(
        (owner, _SOMEONES_CONDITION + "|" + _SOMEONES_HISTORY)
        for owner in ("my", "his", "her", "our", "their", *(f"{r}'s" for r in _FAMILY))
    ),
    *((verb, _SOMEONES_CONDITION) for verb in ("has", "had", "have", "having")),
)
_EN_PRODUCT_TOPICS: Final = _words("""
    health, medical, private medical, life, term life, whole life, dental, travel, hospital,
    hospital cash, critical illness, serious illness, terminal illness, dread disease,
    specified disease, specified illness, cancer, disability, disability income,
    long-term disability, short-term disability, income protection, long-term care,
    mental health, accident, personal accident
""")
_EN_PRODUCT_NOUNS: Final = _words("""
    insurance, insurer, insurers, cover, coverage, policy, policies, plan, plans, rider, riders,
    premium, premiums, quote, quotes, product, products
""")
_EN_IDIOMS: Final = _words("""
    suicide clause, suicide exclusion, suicide period, great depression, retail therapy,
    cough up
""")

_FA_CONDITIONS: Final = _words("""
    دیابت, مرض قند, قند خون, قند دارم, قند داره, قند دارد, سرطان, تومور, لوسمی, لنفوم, متاستاز,
    آسم, صرع, تشنج, سکته, حمله قلبی, بیماری, بیمار, بیماران, مریض, مریضی, ناخوش, مبتلا,
    مبتلایان, ابتلا, فشار خون, کلسترول, چربی خون, ایدز, اچ آی وی, هپاتیت, نارسایی کلیه,
    نارسایی قلبی, سیروز, پارکینسون, آلزایمر, زوال عقل, دمانس, آرتروز, آرتریت, روماتیسم,
    روماتوئید, لوپوس, کولیت, سلیاک, تیروئید, تیرویید, پوکی استخوان, اوتیسم, کم خونی, آنمی,
    تالاسمی, هموفیلی, چاقی مفرط, اگزما, پسوریازیس, میگرن, ناباروری, نازایی, آلرژی,
    کرونا گرفتم, کرونا گرفته, آنفولانزا, آنفلوآنزا, سرماخوردگی, سرما خوردگی, شکستگی, فلج,
    قطع نخاع, سندروم داون, آپاندیس, سنگ کلیه, سنگ کیسه صفرا, کیست تخمدان, فتق, آب مروارید,
    قندم, قندش, قند بالا
""")
_FA_SYMPTOMS: Final = _words("""
    سردرد, سر درد, کمردرد, کمر درد, زانو درد, گردن درد, دندان درد, معده درد, دل درد,
    درد قفسه سینه, درد مزمن, درد دارم, درد داره, درد دارد, تب دارم, تب داره, تب کرد, تب و لرز,
    سرفه, سرگیجه, تهوع, استفراغ, تنگی نفس, خستگی مزمن, بی خوابی, خونریزی, خون ریزی, تپش قلب
""")
_FA_TREATMENTS: Final = _words("""
    جراحی, عمل قلب, عمل باز, شیمی درمانی, پرتو درمانی, رادیوتراپی, دیالیز, پیوند کلیه,
    پیوند کبد, پیوند قلب, پیوند مغز استخوان, فیزیوتراپی, کاردرمانی, کار درمانی, گفتار درمانی,
    روان درمانی, تحت درمان, بستری شد, بستری بود, بستری هست, بستری است, بستری ام, آزمایش خون,
    ام آر آی, سی تی اسکن, سونوگرافی, ماموگرافی, بیوپسی, آندوسکوپی, کولونوسکوپی, ترک اعتیاد,
    نوار قلب, اکو قلب, آنژیوگرافی, آنژیوپلاستی, باتری قلب
""")
_FA_MEDICATIONS: Final = _words("""
    انسولین, متفورمین, آنتی بیوتیک, سرترالین, فلوکستین, متادون, وارفارین, لووتیروکسین,
    آتورواستاتین, داروی اعصاب, قرص اعصاب, داروی فشار, قرص فشار, داروی قند, قرص قند
""")
_FA_PREGNANCY: Final = _words("""
    باردار, بارداری, حامله, حاملگی, سقط, زایمان, سزارین, آی وی اف, لقاح مصنوعی, جنین
""")
_FA_DISABILITY: Final = _words("""
    معلول, معلولان, معلولیت, ناتوانی جسمی, ناتوانی ذهنی, از کار افتادگی, ویلچر, صندلی چرخدار,
    صندلی چرخ دار, نابینا, نابینایی, ناشنوا, ناشنوایی, کم بینا, کم بینایی, کم شنوا,
    کم شنوایی, قطع عضو, سمعک, جانباز, عقب ماندگی ذهنی
""")
_FA_MENTAL: Final = _words("""
    افسردگی, افسرده, اضطراب, وسواس, دوقطبی, دو قطبی, اسکیزوفرنی, روانپزشک, روان پزشک, خودکشی,
    پانیک, حمله عصبی, بیش فعالی, بی اشتهایی عصبی, پرخوری عصبی, اعتیاد, اختلال روانی,
    اختلال اضطرابی, اختلال خواب, اختلال شخصیت, اختلال خوردن, سلامت روان, استرس پس از سانحه
""")
_FA_TERMS: Final = (
    _FA_CONDITIONS
    | _FA_SYMPTOMS
    | _FA_TREATMENTS
    | _FA_MEDICATIONS
    | _FA_PREGNANCY
    | _FA_DISABILITY
    | _FA_MENTAL
)
# Short or suffix-like terms: whole words only ("ام اس" = MS, "تب" = fever).
_FA_EXACT: Final = _words("ام اس, تب")
_FA_SUFFIXES: Final = (
    "هایی", "های", "ها", "مان", "تان", "شان", "اند", "ام", "ات", "اش", "ای", "یم", "ید", "ند",
    "ست", "یی", "یه", "ی", "م", "ت", "ش", "ه",
)  # fmt: skip
# Products are "بیمه <topic>" (with optional ezafe ی or plural). "بیمه سرطان" is not excluded:
# in Persian word order it collides with "insurance [covers] cancer".
_FA_PRODUCT_TOPICS: Final = _words("""
    درمان تکمیلی, درمان, تکمیلی, سلامت, عمر, حوادث, مسافرتی, دندانپزشکی, دندان پزشکی,
    بیماری های خاص, بیماری خاص, بیماری های صعب العلاج, امراض خاص, از کار افتادگی
""")
# "اس ام اس" = SMS (holds "ام اس", MS); "تب و تاب" = excitement.
_FA_IDIOMS: Final = _words("اس ام اس, تب و تاب")

_ZH_CONDITIONS: Final = _words("""
    糖尿病, 癌, 肿瘤, 白血病, 淋巴瘤, 高血压, 低血压, 血压高, 高血脂, 血脂高, 高血糖, 血糖高,
    心脏病, 冠心病, 心梗, 心肌梗, 心衰, 心律不齐, 中风, 脑卒中, 脑梗, 脑出血, 哮喘, 癫痫, 乙肝,
    丙肝, 肝炎, 肝硬化, 艾滋, 结核, 肾病, 肾衰, 尿毒症, 帕金森, 阿尔茨海默, 老年痴呆, 痴呆,
    关节炎, 类风湿, 红斑狼疮, 甲亢, 甲减, 甲状腺, 骨质疏松, 自闭症, 孤独症, 多动症, 贫血,
    血友病, 肥胖症, 湿疹, 银屑病, 牛皮癣, 偏头痛, 不孕, 不育, 过敏, 肺炎, 支气管炎, 慢阻肺,
    痛风, 胃病, 胃炎, 胃溃疡, 结节, 囊肿, 息肉, 骨折, 瘫痪, 感冒, 新冠阳性, 感染新冠, 得了新冠,
    疾病, 重疾, 慢性病, 病史, 病情, 病历, 患有, 患了, 患上, 罹患, 患者, 病人, 生病, 病了, 得病,
    确诊, 诊断出, 被诊断, 诊断为, 唐氏综合征, 结石, 阑尾炎, 增生, 得过新冠, 新冠感染, 血糖
""")
_ZH_SYMPTOMS: Final = _words("""
    发烧, 咳嗽, 头痛, 头疼, 胸痛, 胸闷, 头晕, 呕吐, 失眠, 腰疼, 腰痛, 背痛, 疼痛, 呼吸困难,
    心悸, 心慌, 出血, 肿块
""")
_ZH_TREATMENTS: Final = _words("""
    手术, 化疗, 放疗, 透析, 器官移植, 肾移植, 肝移植, 骨髓移植, 心脏搭桥, 心脏支架, 放支架,
    康复治疗, 理疗, 心理治疗, 心理咨询, 住院了, 住过院, 在住院, 入院, 出院, 重症监护, 活检, 穿刺,
    核磁共振, 胃镜, 肠镜, 彩超, 验血, 正在治疗, 体检异常, 做试管, 心电图
""")
_ZH_MEDICATIONS: Final = _words("""
    胰岛素, 二甲双胍, 降压药, 降糖药, 吃药, 服药, 抗生素, 止痛药, 安眠药, 抗抑郁
""")
_ZH_PREGNANCY: Final = _words("""
    怀孕, 孕妇, 孕期, 孕周, 早孕, 备孕, 避孕, 妊娠, 流产, 堕胎, 人流, 试管婴儿, 产检, 剖腹产,
    剖宫产, 顺产, 分娩, 坐月子, 产后, 胎儿
""")
_ZH_DISABILITY: Final = _words("""
    残疾, 残障, 轮椅, 失明, 失聪, 耳聋, 聋哑, 盲人, 视障, 听障, 截肢, 助听器, 智力障碍
""")
_ZH_MENTAL: Final = _words("""
    抑郁, 焦虑, 躁郁, 双相情感, 精神分裂, 精神病, 心理疾病, 心理健康, 自杀, 自残, 强迫症, 惊恐,
    厌食症, 暴食症, 创伤后应激, 精神科, 心理医生, 失智, 成瘾, 戒毒, 酗酒
""")
_ZH_TERMS: Final = (
    _ZH_CONDITIONS
    | _ZH_SYMPTOMS
    | _ZH_TREATMENTS
    | _ZH_MEDICATIONS
    | _ZH_PREGNANCY
    | _ZH_DISABILITY
    | _ZH_MENTAL
)
# Products are "<topic><noun>": 重疾险 (critical illness insurance), 防癌险 (cancer insurance),
# 医疗保险, 健康险 ... plus 医保 (public medical insurance) and the like.
_ZH_PRODUCT_TOPICS: Final = _words("""
    医疗, 百万医疗, 住院医疗, 住院, 健康, 心理健康, 重疾, 少儿重疾, 重大疾病, 特定疾病, 疾病, 防癌,
    癌症, 意外, 意外伤害, 人寿, 寿, 护理, 失能, 生育
""")
_ZH_PRODUCT_NOUNS: Final = _words("险, 保险, 保障, 产品, 计划, 保单, 条款")
# 不感冒 = "not interested in" (literally "not catching a cold"), 人流量 = foot traffic,
# 毛病/通病/弊病/语病 = fault, common problem, drawback, grammatical error ("出毛病了").
_ZH_IDIOMS: Final = _words("医保, 惠民保, 百万医疗, 不感冒, 人流量, 毛病, 通病, 弊病, 语病")


# ============================================================================================
# Compilation: every word list becomes a character trie, so that at a position the regex
# engine only follows the branches that start with that character. One regex per script;
# Persian and Chinese run only when the text has characters of their script.
# ============================================================================================


class _Node:
    __slots__ = ("children", "tails")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.tails: list[str] = []


def _trie(entries: Iterable[str | tuple[str, str]], joins: dict[str, str] | None = None) -> str:
    """An alternation of words factored by common prefix.

    An entry is a word, or a word and the pattern that must follow it. ``joins`` maps a
    character of a word to a sub-pattern (a space to "spaces or hyphens", say).
    """
    pieces = joins or {}
    root = _Node()
    for entry in entries:
        word, tail = (entry, "") if isinstance(entry, str) else entry
        node = root
        for char in word:
            node = node.children.setdefault(char, _Node())
        node.tails.append(tail)

    def emit(node: _Node) -> str:
        branches = [
            pieces.get(char, re.escape(char)) + emit(child)
            for char, child in sorted(node.children.items())
        ]
        # longer words first; then the tails of a word ending here; "" (end here) last
        branches += [f"(?:{tail})" for tail in dict.fromkeys(node.tails) if tail]
        if "" in node.tails and branches:
            branches.append("")
        if len(branches) == 1:
            return branches[0]
        return "(?:" + "|".join(branches) + ")" if branches else ""

    return "(?:" + emit(root) + ")"


_EN_JOINS: Final = {" ": r"[ -]+", "-": r"[ -]?"}
_EN_BEFORE: Final = r"(?<![a-z0-9])"
_EN_AFTER: Final = r"(?![a-z0-9])"
_FA_JOINS: Final = {" ": r" *"}
_FA_LETTER: Final = r"[\u0620-\u064a\u066e\u066f\u0671-\u06d3\u06d5\u06ee\u06ef\u06fa-\u06ff]"
_FA_BEFORE: Final = rf"(?<!{_FA_LETTER})"
_FA_SUFFIX: Final = f"(?:{'|'.join(_FA_SUFFIXES)}){{0,2}}"
_FA_AFTER: Final = rf"(?!{_FA_LETTER})"

_EN_HEALTH_RE: Final = re.compile(
    rf"(?=[a-z]){_EN_BEFORE}(?:"
    rf"(?P<exclusion>{_trie(_EN_PRODUCT_TOPICS, _EN_JOINS)}[ -]+{_trie(_EN_PRODUCT_NOUNS)}"
    rf"|{_trie(_EN_IDIOMS, _EN_JOINS)}){_EN_AFTER}"
    rf"|(?P<term>{_trie([*((t, '(?:e?s)?') for t in _EN_TERMS), *_EN_PATTERNS], _EN_JOINS)})"
    rf"{_EN_AFTER})"
)
_EN_ACRONYM_RE: Final = re.compile(rf"(?<![A-Za-z0-9]){_trie(_EN_ACRONYMS)}s?(?![A-Za-z0-9])")
_FA_HEALTH_RE: Final = re.compile(
    rf"{_FA_BEFORE}(?:"
    rf"(?P<exclusion>بیمه(?: *(?:ی|ها|های|ای))? *{_trie(_FA_PRODUCT_TOPICS, _FA_JOINS)}"
    rf"|{_trie(_FA_IDIOMS, _FA_JOINS)}){_FA_AFTER}"
    rf"|(?P<term>{_trie([*((t, _FA_SUFFIX) for t in _FA_TERMS), *_FA_EXACT], _FA_JOINS)})"
    rf"{_FA_AFTER})"
)
# Chinese: two plain tries, so the engine skips straight to a possible first character.
_ZH_EXCLUSION_RE: Final = re.compile(
    rf"{_trie(_ZH_PRODUCT_TOPICS)}{_trie(_ZH_PRODUCT_NOUNS)}|{_trie(_ZH_IDIOMS)}"
)
_ZH_TERM_RE: Final = re.compile(_trie(_ZH_TERMS))
_FA_SCRIPT: Final = re.compile(r"[\u0620-\u06ff]")
_ZH_SCRIPT: Final = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def _health_hits(
    text: str, low: str, hits: list[PersonalDataHit], first_only: bool = False
) -> None:
    # English and Persian: one regex whose "exclusion" group is tried first at each position
    regexes = [_EN_HEALTH_RE, _FA_HEALTH_RE] if _FA_SCRIPT.search(low) else [_EN_HEALTH_RE]
    for regex in regexes:
        for match in regex.finditer(low):
            if match.lastgroup == "term":
                hits.append(PersonalDataHit(PersonalDataKind.HEALTH, *match.span()))
                if first_only:
                    return
    # Chinese: the same rule, a term starting inside an exclusion does not count
    if _ZH_SCRIPT.search(low):
        excluded = iter(_ZH_EXCLUSION_RE.finditer(low))
        exclusion = next(excluded, None)
        for match in _ZH_TERM_RE.finditer(low):
            start = match.start()
            while exclusion is not None and exclusion.end() <= start:
                exclusion = next(excluded, None)
            if exclusion is None or start < exclusion.start():
                hits.append(PersonalDataHit(PersonalDataKind.HEALTH, start, match.end()))
                if first_only:
                    return
    for match in _EN_ACRONYM_RE.finditer(text):
        hits.append(PersonalDataHit(PersonalDataKind.HEALTH, *match.span()))
        if first_only:
            return


# ============================================================================================
# Identity and contact details: who a person is and how to reach them
#
# ``find_identifying_data`` is for short values that should hold none of it (a remembered item):
# it leans to refusing. Any of these counts:
#
# * name: a name phrase ("my name is", "call me Ali", اسم من / نام خانوادگی, 我叫 / 姓名), an
#   honorific and a name (Mr. Rezaei, آقای رضایی, 王先生), or two or more capitalised words
#   in a row ("Sara Ahmadi": memory's own values are lower case);
# * email: an address with "@" and a dotted domain;
# * phone: 7-15 digits (grouped by single spaces, dots or dashes, parentheses allowed) that
#   start with "+" or "00", or "0" and run to 11-12 digits (10 when grouped), or are a Chinese
#   mobile (1[3-9] + 9 digits), or read (555) 010-0199, or follow a phone word;
# * date_of_birth: any full date (2026-03-12, 12/03/1985, 12 March 1985, March 12, 1985,
#   ۲۱ اسفند ۱۳۶۴, 1985年3月12日): memory has no use for a date, and a date of birth is the
#   one it must never keep; or a birth word and a year ("born in 1985", متولد ۱۳۶۴, 1985年出生);
# * address: a house number and a street ("12 Baker Street"), a flat or P.O. box number, an
#   address or postcode word, a UK postcode, خیابان / کوچه / پلاک / کد پستی / آدرس, 地址 /
#   住址 / 邮编 / 88号 / 3单元;
# * national_id / passport / policy_number: a number or code the nearest keyword before it
#   (within ``_ID_WINDOW`` characters) names so (passport, گذرنامه, 护照; policy number,
#   شماره بیمه‌نامه, 保单号; national id, کد ملی, 身份证 for numbers failing their check);
#   without a keyword, a letter or two and 7-8 digits is a passport number, another code of
#   letters and 6 or more digits a policy number.
#
# Every expression here is linear: no unbounded repetition nests another that can match the
# same text, and windows are bounded (tests/unit/domain/test_linearity.py).
# ============================================================================================

_EMAIL_RE: Final = re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+")

# A run of digit groups joined by one space, dot or dash (a group may sit in parentheses).
_DIGIT_RUN_RE: Final = re.compile(
    r"(?<![\w+(])(?:\+ ?)?\(?[0-9]+\)?(?:[ .-]\(?[0-9]+\)?)*(?![0-9a-z])"
)
# A code: letters then digits (E12345678, P2024000123), or letters, a dash, digits (POL-2024-1).
_CODE_RE: Final = re.compile(r"(?<![0-9a-z])[a-z]{1,4}-?[0-9][0-9a-z]*(?:-[0-9a-z]+)*(?![0-9a-z])")
_PASSPORT_SHAPE: Final = re.compile(r"[a-z]{1,2}[0-9]{7,8}")
_NANP_SHAPE: Final = re.compile(r"\(?[0-9]{3}\)?[ .-][0-9]{3}[ .-][0-9]{4}")
_CN_MOBILE: Final = re.compile(r"1[3-9][0-9]{9}")
_ID_WINDOW: Final = 40
_ID_WORDS: Final = {
    "phone": (
        "phone", "telephone", "tel", "mobile", "cell", "call", "whatsapp", "fax", "sms",
        "contact number", "تلفن", "موبایل", "همراه", "شماره تماس", "تماس", "电话", "手机",
        "联系方式", "联系电话",
    ),
    "passport": ("passport", "پاسپورت", "گذرنامه", "护照"),
    "policy_number": (
        "policy number", "policy no", "policy #", "policy", "member number", "membership",
        "member id", "certificate number", "contract number", "شماره بیمه نامه",
        "شماره بیمه", "بیمه نامه", "شماره قرارداد", "保单号", "保单", "合同号", "会员号",
    ),
    "national_id": (
        "national id", "national code", "national number", "national insurance number",
        "id number", "id card", "identity card", "ssn", "social security", "melli",
        "کد ملی", "کدملی", "شماره ملی", "شماره شناسنامه", "身份证", "证件号",
    ),
    "address": (
        "postcode", "post code", "postal code", "zip", "zip code", "کد پستی", "کدپستی",
        "邮编", "邮政编码",
    ),
}  # fmt: skip
_ID_WORD_RE: Final = re.compile(
    "|".join(
        f"(?P<{kind}>{_keyword_pattern(sorted(words, key=len, reverse=True))})"
        for kind, words in _ID_WORDS.items()
    )
)


def _nearest_id_word(low: str, start: int) -> str | None:
    kind = None
    for keyword in _ID_WORD_RE.finditer(low, max(0, start - _ID_WINDOW), start):
        kind = keyword.lastgroup
    return kind


def _is_phone(run: str, digits: str) -> bool:
    size = len(digits)
    if not 7 <= size <= 15:
        return False
    grouped = any(c in run for c in " .-()")
    return (
        run.startswith("+")
        or (digits.startswith("00") and size >= 11)
        or (digits[0] == "0" and (size in (11, 12) or (size == 10 and grouped)))
        or (size == 11 and _CN_MOBILE.fullmatch(digits) is not None)
        or (size == 10 and _NANP_SHAPE.fullmatch(run) is not None)
    )


def _number_kind(low: str, start: int, run: str, digits: str) -> PersonalDataKind | None:
    """The kind of the number or code ``run`` at ``start``, by its keyword, else its shape."""
    keyword = _nearest_id_word(low, start)
    size = len(digits)
    if keyword == "phone" and 7 <= size <= 15:
        return PersonalDataKind.PHONE
    if keyword == "passport" and size >= 6:
        return PersonalDataKind.PASSPORT
    if keyword == "policy_number" and size >= 4:
        return PersonalDataKind.POLICY_NUMBER
    if keyword == "national_id" and size >= 8:
        return PersonalDataKind.NATIONAL_ID
    if keyword == "address" and size >= 4:
        return PersonalDataKind.ADDRESS
    if run.isdigit() or not run[0].isalpha():
        return PersonalDataKind.PHONE if _is_phone(run, digits) else None
    if _PASSPORT_SHAPE.fullmatch(run):
        return PersonalDataKind.PASSPORT
    if size >= 6:
        return PersonalDataKind.POLICY_NUMBER
    return None


def _number_and_code_hits(low: str, hits: list[PersonalDataHit]) -> None:
    for regex in (_DIGIT_RUN_RE, _CODE_RE):
        for match in regex.finditer(low):
            run = match.group()
            digits = "".join(c for c in run if c.isdigit())
            kind = _number_kind(low, match.start(), run, digits)
            if kind is not None:
                hits.append(PersonalDataHit(kind, *match.span()))


# --- dates ----------------------------------------------------------------------------------

_EN_MONTHS: Final = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
    "|jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec"
)
_FA_MONTHS: Final = (
    "فروردین|اردیبهشت|خرداد|تیر|مرداد|شهریور|مهر|آبان|ابان|آذر|اذر|دی|بهمن|اسفند"
    "|ژانویه|فوریه|مارس|آوریل|اوریل|مه|ژوئن|ژوئیه|اوت|سپتامبر|اکتبر|نوامبر|دسامبر"
)
_DATE_RE: Final = re.compile(
    # 1985-03-12, 1364/12/21
    r"(?<![0-9])(?P<ymd>[0-9]{4})[/.-](?P<m1>[0-9]{1,2})[/.-](?P<d1>[0-9]{1,2})(?![0-9])"
    # 12/03/1985, 03-12-85
    r"|(?<![0-9])(?P<a>[0-9]{1,2})[/.-](?P<b>[0-9]{1,2})[/.-](?P<y>[0-9]{4}|[0-9]{2})(?![0-9])"
    # 12 March 1985, 12th of March, 1985, March 12, 1985
    rf"|(?<![0-9a-z])[0-9]{{1,2}}(?:st|nd|rd|th)?(?:\s+of)?\s+(?:{_EN_MONTHS})\.?,?\s+[0-9]{{4}}"
    rf"(?![0-9])"
    rf"|(?<![a-z])(?:{_EN_MONTHS})\.?\s+[0-9]{{1,2}}(?:st|nd|rd|th)?,?\s+[0-9]{{4}}(?![0-9])"
    # ۲۱ اسفند ۱۳۶۴
    rf"|(?<![0-9])[0-9]{{1,2}}\s*(?:{_FA_MONTHS})\s*(?:ماه\s*)?[0-9]{{4}}(?![0-9])"
    # 1985年3月12日, 1985年3月
    r"|(?<![0-9])[0-9]{2,4} *年 *[0-9]{1,2} *月(?: *[0-9]{1,2} *[日号])?"
)
_BIRTH_WORD_RE: Final = re.compile(
    r"(?<![a-z])(?:born|birth|birthday|birthdate|dob|d\.o\.b)(?![a-z])"
    r"|متولد|تولد|زادروز|出生|生日"
)
_YEAR_RE: Final = re.compile(r"(?<![0-9])(?:1[2-9][0-9]{2}|20[0-9]{2})(?![0-9])")
_BIRTH_YEAR_REACH: Final = 24


def _is_date(match: re.Match[str]) -> bool:
    if match.group("ymd") is not None:
        return 1 <= int(match.group("m1")) <= 12 and 1 <= int(match.group("d1")) <= 31
    if match.group("a") is not None:
        a, b = int(match.group("a")), int(match.group("b"))
        return 1 <= a <= 31 and 1 <= b <= 31 and min(a, b) <= 12
    return True


def _date_hits(low: str, hits: list[PersonalDataHit]) -> None:
    for match in _DATE_RE.finditer(low):
        if _is_date(match):
            hits.append(PersonalDataHit(PersonalDataKind.DATE_OF_BIRTH, *match.span()))
    for word in _BIRTH_WORD_RE.finditer(low):
        # a year just after the birth word ("born in 1985", متولد ۱۳۶۴) or just before it
        # ("1985年出生")
        after = _YEAR_RE.search(low, word.end(), word.end() + _BIRTH_YEAR_REACH)
        if after is not None:
            hits.append(PersonalDataHit(PersonalDataKind.DATE_OF_BIRTH, word.start(), after.end()))
            continue
        before = _YEAR_RE.search(low, max(0, word.start() - 8), word.start())
        if before is not None:
            hits.append(PersonalDataHit(PersonalDataKind.DATE_OF_BIRTH, before.start(), word.end()))


# --- addresses ------------------------------------------------------------------------------

_STREET_TYPES: Final = (
    "street|st|road|rd|avenue|ave|lane|ln|drive|dr|boulevard|blvd|way|court|ct|place|pl|square"
    "|sq|crescent|cres|close|terrace|highway|hwy|parkway|pkwy|alley|mews|gardens|grove"
)
_ADDRESS_RE: Final = re.compile(
    # 12 Baker Street, 221b baker st
    rf"(?<![0-9a-z])[0-9]{{1,5}}[a-z]?,?\s+(?:[a-z'.-]+\s+){{1,3}}?(?:{_STREET_TYPES})\.?"
    r"(?![a-z])"
    r"|(?<![a-z])(?:apartment|apt|flat|suite|unit)\.?\s?#?\s?[0-9]+"
    r"|(?<![a-z])p\.?\s?o\.?\s+box\s+[0-9]+"
    r"|(?<![a-z])(?:my address|address is|address:|home address|i live at|we live at|lives at"
    r"|postcode|post code|postal code|zip code)(?![a-z])"
    # a UK postcode: SW1A 1AA, NW1 6XE
    r"|(?<![0-9a-z])[a-z]{1,2}[0-9][a-z0-9]? ?[0-9][a-z]{2}(?![0-9a-z])"
    rf"|{_FA_BEFORE}(?:خیابان|کوچه|بلوار|بن *بست|پلاک|کد *پستی|نشانی|آدرس|ادرس)"
    r"(?:ی|ها|های|م|مان)?"
    rf"{_FA_AFTER}"
    r"|地址|住址|邮编|邮政编码|门牌|(?<![0-9])[0-9]+ *(?:号楼|号院|号|室|单元|栋|幢)|小区|胡同"
    r"|(?:路|街|大道|巷|弄) *[0-9]+"
)

# --- names ----------------------------------------------------------------------------------

_NAME_RE: Final = re.compile(
    # a name phrase: what follows is a name, whatever its case
    r"(?i:(?<![a-z])(?:my|his|her|their|our)\s+(?:(?:full|first|last|given|family|maiden"
    r"|middle)\s+)?name(?:\s+is|'s|\s*:))"
    r"|(?i:(?<![a-z])(?:(?:full|first|last|given|family|maiden|middle)\s+name|surname"
    r"|i\s+am\s+called|i'm\s+called)(?![a-z]))"
    r"|(?i:(?<![a-z])name\s*:)"
    # "call me Ali"; an honorific and a name
    r"|(?i:(?<![a-z])call\s+me)\s+[A-Z][a-z'’-]+"
    r"|(?<![A-Za-z])(?i:mr|mrs|ms|miss|mx|dr|prof|sir|madam)\.?\s+[A-Z][a-z'’-]+"
    # two or more capitalised words in a row
    r"|(?<![A-Za-z])[A-Z][a-z'’-]+(?:\s+[A-Z][a-z'’-]+)+(?![A-Za-z])"
)
_FA_NAME_RE: Final = re.compile(
    rf"{_FA_BEFORE}(?:اسمم|اسم من|اسمش|اسم ایشان|نامم|نام من|نام خانوادگی|نام و نام خانوادگی"
    r"|اسم و فامیل|فامیلی من|فامیلیم|فامیلم|اسم کوچک)"
    rf"{_FA_AFTER}"
    rf"|{_FA_BEFORE}(?:نام|اسم) *:"
    rf"|{_FA_BEFORE}(?:آقای|اقای|خانم|جناب|سرکار)\s+{_FA_LETTER}"
)
_ZH_NAME_RE: Final = re.compile(
    r"我叫|我的名字|名字是|名字叫|姓名|本人姓|我姓|叫我|全名|真名"
    r"|(?![我你他她您它的和与跟位个老小])[\u4e00-\u9fff](?:先生|女士|小姐)"
)


def _name_hits(text: str, low: str, hits: list[PersonalDataHit]) -> None:
    # capitals tell English names: the original text, not the folded one
    for match in _NAME_RE.finditer(text):
        hits.append(PersonalDataHit(PersonalDataKind.NAME, *match.span()))
    if _FA_SCRIPT.search(low):
        for match in _FA_NAME_RE.finditer(low):
            hits.append(PersonalDataHit(PersonalDataKind.NAME, *match.span()))
    if _ZH_SCRIPT.search(low):
        for match in _ZH_NAME_RE.finditer(low):
            hits.append(PersonalDataHit(PersonalDataKind.NAME, *match.span()))


def _identifying_hits(text: str, low: str, hits: list[PersonalDataHit]) -> None:
    if "@" in low:
        hits.extend(
            PersonalDataHit(PersonalDataKind.EMAIL, *m.span()) for m in _EMAIL_RE.finditer(low)
        )
    if _ANY_DIGIT.search(low):
        _number_and_code_hits(low, hits)
        _date_hits(low, hits)
    hits.extend(
        PersonalDataHit(PersonalDataKind.ADDRESS, *m.span()) for m in _ADDRESS_RE.finditer(low)
    )
    _name_hits(text, low, hits)


# ============================================================================================
# Public entry points
# ============================================================================================


def find_personal_data(text: str) -> list[PersonalDataHit]:
    """Every personal-data finding in ``text``, ordered by start; spans index ``text``.

    Overlapping findings are reported once (the earlier, then the longer one).
    """
    low = _fold(text)
    found: list[PersonalDataHit] = []
    if _ANY_DIGIT.search(low):
        _iban_hits(low, found)
        _number_hits(low, found)
    _health_hits(text, low, found)
    return _disjoint(found)


def _disjoint(found: list[PersonalDataHit]) -> list[PersonalDataHit]:
    """``found`` ordered by start, overlaps dropped (the earlier, then the longer one kept)."""
    found.sort(key=lambda hit: (hit.start, -hit.end))
    result: list[PersonalDataHit] = []
    for hit in found:
        if not result or hit.start >= result[-1].end:
            result.append(hit)
    return result


def find_identifying_data(text: str) -> list[PersonalDataHit]:
    """Names, e-mail addresses, phone numbers, dates (of birth), addresses, and national,
    passport and policy numbers in ``text``, ordered by start, overlaps dropped; spans index
    ``text``. Strict, for short values that should hold none (a remembered item): see the
    section's comment for what counts."""
    low = _fold(text)
    found: list[PersonalDataHit] = []
    _identifying_hits(text, low, found)
    return _disjoint(found)


def contains_health_data(text: str) -> bool:
    """Whether ``text`` states health information (the health lexicon above; stops at the
    first finding)."""
    found: list[PersonalDataHit] = []
    _health_hits(text, _fold(text), found, first_only=True)
    return bool(found)


def contains_personal_data(text: str) -> bool:
    """Whether ``find_personal_data(text)`` would report anything (stops at the first)."""
    low = _fold(text)
    found: list[PersonalDataHit] = []
    _health_hits(text, low, found, first_only=True)
    if not found and _ANY_DIGIT.search(low):
        _number_hits(low, found)
        if not found:
            _iban_hits(low, found)
    return bool(found)
