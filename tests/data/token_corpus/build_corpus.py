"""Builds ``fit.jsonl`` and ``heldout.jsonl`` from the hand-written sentences under ``sources/``.

Run from the repository root (deterministic: same sources, same output)::

    .venv/bin/python tests/data/token_corpus/build_corpus.py

Each message is a run of sentences drawn from one split's pools, with slots ({POLICY}, {URL},
{AMOUNT_FA}, ...) filled by that split's own generators, and that split's greetings, sign-offs,
emoji and layout. The FIT and HELD-OUT pools share no sentence: FIT is about motor and health
insurance and payments; HELD-OUT is about travel, home and life insurance, complaints and
cancellations. Both splits mix formal agent text and colloquial customer text.
"""

from __future__ import annotations

import itertools
import json
import math
import random
import string
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
MIN_CHARS = 200
MAX_CHARS = 2000
SEEDS = {"fit": 20240601, "heldout": 20250117}
COUNTS = {
    "fit": {"fa": 70, "zh": 70, "en": 60, "fa+en": 60, "zh+en": 60},
    "heldout": {"fa": 50, "zh": 50, "en": 45, "fa+en": 45, "zh+en": 45},
}
#: Which sentence pools a message of each language draws from, with weights. Each language has a
#: written/agent register (``*.formal``) and a chat/customer register (``*.chat``), drawn equally in
#: both splits, so that the splits differ in sentences and topics but not in register mix.
MIXES: dict[str, list[tuple[str, float]]] = {
    "fa": [("fa.formal", 0.5), ("fa.chat", 0.5)],
    "zh": [("zh.formal", 0.5), ("zh.chat", 0.5)],
    "en": [("en.formal", 0.5), ("en.chat", 0.5)],
    "fa+en": [
        ("fa_en", 0.5),
        ("fa.formal", 0.15),
        ("fa.chat", 0.15),
        ("en.formal", 0.1),
        ("en.chat", 0.1),
    ],
    "zh+en": [
        ("zh_en", 0.5),
        ("zh.formal", 0.15),
        ("zh.chat", 0.15),
        ("en.formal", 0.1),
        ("en.chat", 0.1),
    ],
}
CJK_POOLS = {"zh.formal", "zh.chat", "zh_en"}
FA_DIGITS = str.maketrans("0123456789,", "۰۱۲۳۴۵۶۷۸۹٬")

GREETINGS = {
    "fit": {
        "fa": ["با سلام و احترام،", "مشتری گرامی،", "سلام، وقت بخیر.", "بیمه‌گذار محترم،"],
        "zh": ["您好！", "尊敬的客户：", "您好，这里是理赔服务中心。", "客户您好，"],
        "en": ["Dear customer,", "Hello,", "Good morning,", "Dear policyholder,"],
    },
    "heldout": {
        "fa": ["سلام", "سلام خسته نباشید", "درود", "سلام مجدد!", "ببخشید مزاحم میشم"],
        "zh": ["在吗？", "你好", "hi，", "又是我，", "打扰一下～"],
        "en": ["hi", "Hey there!", "Hi again,", "hello??", "Morning —"],
    },
}
CLOSINGS = {
    "fit": {
        "fa": ["با تشکر، واحد خسارت", "با احترام، مرکز پشتیبانی", "موفق و پیروز باشید."],
        "zh": ["祝您生活愉快！", "客服专员 小李", "如有疑问请随时联系我们。"],
        "en": ["Best regards,\nClaims Team", "Kind regards,\nCustomer Care", "Have a nice day!"],
    },
    "heldout": {
        "fa": ["ممنون", "منتظرم", "مرسی از وقتی که میذارید", "فعلاً خداحافظ"],
        "zh": ["谢谢", "等你们消息", "辛苦了", "拜托了！！"],
        "en": ["thx", "Waiting to hear back.", "cheers", "thanks in advance!!"],
    },
}
EMOJI = {
    "fit": ["🙂", "👍", "✅", "🚗", "📄", "☎️", "🏥", "😊"],
    "heldout": ["😞", "🙏", "😡", "❤️", "😤", "👍🏽", "✈️", "🏠", "👨‍👩‍👧", "🔥", "😂", "🤦‍♂️"],
}


def _digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


def _letters(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.ascii_uppercase) for _ in range(n))


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _amount(rng: random.Random, lo: int, hi: int, step: int) -> str:
    return f"{rng.randrange(lo, hi, step):,}"


def _maybe_fa(rng: random.Random, text: str, p: float) -> str:
    return text.translate(FA_DIGITS) if rng.random() < p else text


def slot_fillers(split: str) -> dict[str, Callable[[random.Random], str]]:
    """One generator per slot; the two splits use different formats and domains."""
    if split == "fit":
        return {
            "POLICY": lambda r: f"PL-{r.randint(2021, 2025)}-{_digits(r, 5)}",
            "CLAIM": lambda r: f"CLM-{r.randint(2023, 2025)}-{_digits(r, 5)}",
            "DATE": lambda r: (
                f"{r.randint(2024, 2026)}-{r.randint(1, 12):02d}-{r.randint(1, 28):02d}"
            ),
            "DATE_FA": lambda r: _maybe_fa(
                r, f"{r.randint(1402, 1404)}/{r.randint(1, 12):02d}/{r.randint(1, 29):02d}", 0.5
            ),
            "DATE_ZH": lambda r: (
                f"{r.randint(2024, 2026)}年{r.randint(1, 12)}月{r.randint(1, 28)}日"
            ),
            "DATE_EN": lambda r: (
                f"{r.randint(1, 12):02d}/{r.randint(1, 28):02d}/{r.randint(2024, 2026)}"
            ),
            "AMOUNT_FA": lambda r: _maybe_fa(r, _amount(r, 5_000_000, 900_000_000, 50_000), 0.4),
            "AMOUNT_ZH": lambda r: _amount(r, 500, 90_000, 10),
            "AMOUNT_EN": lambda r: f"{_amount(r, 100, 25_000, 5)}.{r.choice(['00', '50', '75'])}",
            "PHONE": lambda r: (
                r.choice(["+98 21 ", "+86 21 "]) + f"{_digits(r, 4)} {_digits(r, 4)}"
            ),
            "PHONE_FA": lambda r: _maybe_fa(r, f"0912{_digits(r, 7)}", 0.5),
            "PHONE_ZH": lambda r: f"1{r.choice('3589')}{_digits(r, 9)}",
            "PHONE_EN": lambda r: f"({_digits(r, 3)}) 555-{_digits(r, 4)}",
            "URL": lambda r: r.choice(
                [
                    f"https://portal.bimeh-example.ir/claims/{_digits(r, 6)}?lang=fa",
                    f"https://www.insure-example.cn/policy/download?id={_digits(r, 8)}",
                    "https://help.example-insurance.com/docs/"
                    + r.choice(["pay", "renew", "claims"]),
                ]
            ),
            "EMAIL": lambda r: r.choice(
                ["support@bimeh-example.ir", "claims@insure-example.cn", "it.help@example.com"]
            ),
            "CODE": lambda r: (
                r.choice(["AUTO", "CAR", "HEALTH"])
                + f"-{r.choice(['PLUS', 'GO'])}-"
                + str(r.randint(1, 9))
            ),
            "PLATE_FA": lambda r: (
                f"{r.randint(10, 99)} ب {r.randint(100, 999)} ایران {r.randint(10, 99)}"
            ),
            "PLATE_ZH": lambda r: f"{r.choice('沪京粤苏浙')}{_letters(r, 1)}·{_digits(r, 5)}",
            "PLATE_EN": lambda r: f"{r.randint(1, 9)}{_letters(r, 3)}{_digits(r, 3)}",
            "IBAN": lambda r: f"IR{_digits(r, 24)}",
            "BANKCARD": lambda r: f"6222 {_digits(r, 4)} {_digits(r, 4)} {_digits(r, 4)}",
            "BANK_EN": lambda r: f"routing {_digits(r, 9)}, account {_digits(r, 10)}",
            "RECEIPT": lambda r: f"RCPT-{_digits(r, 8)}",
            "TICKET": lambda r: f"#TK-{_digits(r, 5)}",
        }
    return {
        "CLAIM": lambda r: f"{r.choice(['TRV', 'HOM', 'LIF'])}{_digits(r, 9)}",
        "DATE_FA": lambda r: _maybe_fa(r, f"{r.choice(['فروردین', 'مهر', 'اسفند'])}", 1.0),
        "DATE_ZH": lambda r: f"{r.randint(1, 12)}月{r.randint(1, 28)}号",
        "DATE_EN": lambda r: f"{r.choice(['March', 'June', 'Oct.'])} {r.randint(1, 28)}",
        "AMOUNT_FA": lambda r: _maybe_fa(r, _amount(r, 100_000_000, 3_000_000_000, 1_000_000), 0.6),
        "AMOUNT_ZH": lambda r: f"{r.randint(2, 30)}万",
        "AMOUNT_EN": lambda r: _amount(r, 8_000, 120_000, 500),
        "PHONE_FA": lambda r: _maybe_fa(
            r, f"09{_digits(r, 2)} {_digits(r, 3)} {_digits(r, 4)}", 0.7
        ),
        "PHONE_ZH": lambda r: f"1{r.choice('3579')}{_digits(r, 1)}-{_digits(r, 4)}-{_digits(r, 4)}",
        "PHONE_EN": lambda r: f"+1 {_digits(r, 3)}-{_digits(r, 3)}-{_digits(r, 4)}",
        "URL": lambda r: f"https://pay.safeshield.example.org/l/{_hex(r, 8)}-{_hex(r, 4)}?src=sms",
        "EMAIL": lambda r: (
            r.choice(["reza.k", "mina_1990", "wang.lei88", "jdoe"])
            + f"@{r.choice(['gmail.com', 'yahoo.com', 'outlook.com', 'qq.com'])}"
        ),
        "BOOKING": lambda r: _letters(r, 2) + _digits(r, 1) + _letters(r, 3),
        "TXN": lambda r: f"txn_{_hex(r, 12)}",
        "TIME": lambda r: _maybe_fa(
            r, f"{r.randint(7, 23)}:{r.choice(['00', '15', '30', '45'])}", 0.3
        ),
    }


def load_pools(split: str) -> dict[str, list[str]]:
    pools = {}
    for path in sorted((HERE / "sources" / split).glob("*.txt")):
        lines = path.read_text(encoding="utf-8").splitlines()
        pools[path.stem] = [line.strip() for line in lines if line.strip()]
    return pools


def fill(
    sentence: str,
    fillers: dict[str, Callable[[random.Random], str]],
    rng: random.Random,
    emoji: list[str],
) -> str:
    out = sentence
    while "{" in out:
        start = out.index("{")
        end = out.index("}", start)
        key = out[start + 1 : end]
        value = rng.choice(emoji) if key == "EMOJI" else fillers[key](rng)
        out = out[:start] + value + out[end + 1 :]
    return out


def build_message(
    split: str,
    lang: str,
    pools: dict[str, list[str]],
    fillers: dict[str, Callable[[random.Random], str]],
    rng: random.Random,
) -> str:
    target = int(math.exp(rng.uniform(math.log(MIN_CHARS + 20), math.log(MAX_CHARS - 150))))
    names = [name for name, _ in MIXES[lang]]
    weights = [weight for _, weight in MIXES[lang]]
    base = "zh" if lang.startswith("zh") else "fa" if lang.startswith("fa") else "en"
    numbered = split == "heldout" and rng.random() < 0.2
    parts: list[tuple[str, bool]] = []  # (text, is_cjk)
    if rng.random() < 0.6:
        parts.append((rng.choice(GREETINGS[split][base]), base == "zh"))
    used: set[tuple[str, int]] = set()
    length = 0
    item = 1
    while length < target:
        pool = rng.choices(names, weights)[0]
        index = rng.randrange(len(pools[pool]))
        in_pool = sum(1 for name, _ in used if name == pool)
        if (pool, index) in used and in_pool < len(pools[pool]):
            continue  # no sentence twice in a message until its pool is exhausted
        used.add((pool, index))
        sentence = fill(pools[pool][index], fillers, rng, EMOJI[split])
        if rng.random() < (0.15 if split == "heldout" else 0.05):
            sentence += rng.choice(EMOJI[split])
        if numbered:
            sentence = f"{item}. {sentence}" if base != "zh" else f"{item}、{sentence}"
            item += 1
        if length + len(sentence) > MAX_CHARS - 60:
            break
        parts.append((sentence, pool in CJK_POOLS))
        length += len(sentence) + 1
    if rng.random() < 0.5:
        parts.append((rng.choice(CLOSINGS[split][base]), base == "zh"))
    text = parts[0][0]
    for (_, prev_cjk), (cur, cur_cjk) in itertools.pairwise(parts):
        roll = rng.random()
        if numbered or roll < 0.08:
            sep = "\n"
        elif roll < 0.12:
            sep = "\n\n"
        elif prev_cjk and cur_cjk:
            sep = ""
        else:
            sep = " "
        text += sep + cur
    return text


def build(split: str) -> list[dict[str, str]]:
    """The rows of one split, in file order (deterministic)."""
    rng = random.Random(SEEDS[split])
    pools = load_pools(split)
    fillers = slot_fillers(split)
    rows = []
    for lang, count in COUNTS[split].items():
        made = 0
        while made < count:
            text = build_message(split, lang, pools, fillers, rng)
            if MIN_CHARS <= len(text) <= MAX_CHARS:
                rows.append({"lang": lang, "text": text})
                made += 1
    return rows


def main() -> None:
    for split in ("fit", "heldout"):
        rows = build(split)
        with (HERE / f"{split}.jsonl").open("w", encoding="utf-8") as out:
            for row in rows:
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(split, len(rows), "messages", sum(len(r["text"]) for r in rows), "chars")


if __name__ == "__main__":
    main()
