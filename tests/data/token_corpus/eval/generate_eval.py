"""Writes ``generated.jsonl``: seeded synthetic EVAL text, made before any fitting, never fitted on.

Run from the repository root (deterministic)::

    .venv/bin/python tests/data/token_corpus/eval/generate_eval.py

A design unlike ``build_corpus.py`` (which recombines whole hand-written insurance sentences): a
Zipf-weighted word sampler over its own vocabularies (weather, food, sport, city, nature, family,
computers; no insurance words), with random sentence lengths, heavy and repeated punctuation,
numbers of every shape (ASCII and Persian digits, dates, times, prices, percentages, phones,
versions), URLs, e-mail addresses, hashtags, emoji, lists and blank lines. ``code`` messages mix
English prose with generated snippets in Python, JavaScript, shell, SQL and JSON.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 7_345_002
PER_LANG = 40

EN = """the a of and to in is it that was for on with as at by this from but not or have
weather rain snow wind cloud storm sunny cold warm morning evening night river mountain forest
tree garden flower bird dog cat horse market bread cheese soup tomato onion garlic kitchen oven
recipe dinner lunch breakfast football match goal team coach player stadium season league
score city street bridge tram station museum library park square tower neighbour family
mother father sister brother grandmother children school teacher lesson homework holiday
computer keyboard screen battery update server browser password download laptop printer cable
quickly slowly really almost never always often yesterday tomorrow tonight suddenly
beautiful quiet noisy broken tiny enormous purple golden ancient modern strange wonderful
run walk cook bake build fix watch listen forget remember carry throw catch climb paint sing
because although while unless whenever therefore however meanwhile extraordinary
unbelievably photosynthesis thermodynamics infrastructure""".split()

FA = """و در به از که این را با است برای آن یک تا بود هم می ما شما او
هوا باران برف باد ابر طوفان آفتابی سرد گرم صبح عصر شب رودخانه کوه جنگل درخت باغ گل پرنده
سگ گربه اسب بازار نان پنیر سوپ گوجه پیاز سیر آشپزخانه فر دستور شام ناهار صبحانه فوتبال
مسابقه گل تیم مربی بازیکن ورزشگاه فصل لیگ امتیاز شهر خیابان پل ایستگاه موزه کتابخانه پارک
میدان برج همسایه خانواده مادر پدر خواهر برادر مادربزرگ بچه‌ها مدرسه معلم درس تکلیف تعطیلات
رایانه صفحه‌کلید باتری به‌روزرسانی سرور مرورگر گذرواژه بارگیری چاپگر
سریع آهسته واقعاً تقریباً هرگز همیشه اغلب دیروز فردا امشب ناگهان زیبا آرام شلوغ خراب
کوچک بزرگ بنفش طلایی باستانی مدرن عجیب شگفت‌انگیز دویدن راه‌رفتن پختن ساختن تعمیر
تماشا گوش‌دادن فراموش یادآوری می‌رود می‌آید می‌خورد نمی‌دانم می‌خواهیم رفته‌ایم
زیرا اگرچه درحالی‌که مگر بنابراین هرچند خوشبختانه متأسفانه فتوسنتز زیرساخت""".split()

ZH = """的 了 是 在 和 有 我 他 她 我们 你们 这 那 不 也 都 就 很 还 又
天气 下雨 下雪 刮风 多云 暴风雨 晴天 寒冷 温暖 早上 傍晚 夜里 河流 山 森林 树 花园 花 鸟 狗 猫
马 市场 面包 奶酪 汤 西红柿 洋葱 大蒜 厨房 烤箱 菜谱 晚饭 午饭 早饭 足球 比赛 进球 球队
教练 球员 体育场 赛季 联赛 比分 城市 街道 桥 电车 车站 博物馆 图书馆 公园 广场 塔 邻居
家人 妈妈 爸爸 姐姐 哥哥 奶奶 孩子们 学校 老师 课 作业 假期 电脑 键盘 屏幕 电池 更新
服务器 浏览器 密码 下载 笔记本 打印机 数据线 快速地 慢慢地 真的 几乎 从来 总是 经常
昨天 明天 今晚 突然 美丽 安静 吵闹 坏了 小小的 巨大 紫色 金色 古老 现代 奇怪 精彩
跑步 散步 做饭 烘焙 建造 修理 观看 听 忘记 记得 搬 扔 接住 爬 画画 唱歌 因为 虽然
一边 除非 所以 但是 与此同时 光合作用 热力学 基础设施 饕餮 龃龉 耄耋 踟蹰 旖旎""".split()

EMOJI = ["😀", "😂", "🌧️", "⚽", "🍅", "🔥", "👍🏻", "🎉", "🤔", "❤️", "✨", "🐈"]
EN_PUNCT = [".", ".", ".", "!", "?", "!!", "?!", "...", ";", ":", " -", "!!!"]
FA_PUNCT = [".", ".", "!", "؟", "!!", "؟!", "...", "؛", ":", "،"]
ZH_PUNCT = ["。", "。", "！", "？", "！！", "？！", "……", "；", "：", "～"]
FA_DIGITS = str.maketrans("0123456789", "۰۱۲۳۴۵۶۷۸۹")


def zipf(rng: random.Random, words: list[str]) -> str:
    """A word drawn with probability ~ 1 / rank (the list is in rough frequency order)."""
    rank = int(len(words) ** rng.random()) - 1
    return words[min(rank, len(words) - 1)]


def number(rng: random.Random) -> str:
    kind = rng.randrange(9)
    if kind == 0:
        return str(rng.randrange(10))
    if kind == 1:
        return str(rng.randrange(10, 10_000))
    if kind == 2:
        return f"{rng.randrange(1, 10**7):,}"
    if kind == 3:
        return f"{rng.randrange(1990, 2031)}-{rng.randrange(1, 13):02}-{rng.randrange(1, 29):02}"
    if kind == 4:
        return f"{rng.randrange(24):02}:{rng.randrange(60):02}"
    if kind == 5:
        return f"{rng.uniform(0, 100):.1f}%"
    if kind == 6:
        return f"${rng.randrange(1, 999)}.{rng.randrange(100):02}"
    if kind == 7:
        return "0" + "".join(rng.choice("0123456789") for _ in range(rng.randrange(8, 12)))
    return f"v{rng.randrange(10)}.{rng.randrange(30)}.{rng.randrange(100)}"


def extra(rng: random.Random) -> str:
    """URLs, e-mail addresses, hashtags, codes, emoji."""
    kind = rng.randrange(5)
    word = rng.choice(["weather", "garden", "match", "recipe", "city", "river", "laptop"])
    if kind == 0:
        return f"https://www.{word}-{rng.randrange(100)}.example.net/{word}?id={rng.randrange(10**6)}"
    if kind == 1:
        return f"{word}.{rng.randrange(1000)}@mail.example.com"
    if kind == 2:
        return f"#{word}{rng.randrange(100)}"
    if kind == 3:
        letters = "ABCDEFGHJKLMNPQRSTUVWXYZ"
        return "".join(rng.choice(letters) for _ in range(3)) + f"-{rng.randrange(10**5):05}"
    return rng.choice(EMOJI)


def en_sentence(rng: random.Random) -> str:
    words: list[str] = []
    for i in range(rng.randrange(3, 16)):
        roll = rng.random()
        if roll < 0.08:
            words.append(number(rng))
        elif roll < 0.12:
            words.append(extra(rng))
        else:
            word = zipf(rng, EN)
            if i == 0 or rng.random() < 0.05:
                word = word.capitalize() if rng.random() < 0.9 else word.upper()
            words.append(word)
        if rng.random() < 0.08:
            words[-1] += rng.choice([",", ",", ")", '"', "'s"])
    return " ".join(words) + rng.choice(EN_PUNCT)


def fa_sentence(rng: random.Random, english: float = 0.0) -> str:
    words: list[str] = []
    for _ in range(rng.randrange(3, 16)):
        roll = rng.random()
        if roll < english:
            words.append(zipf(rng, EN[20:]))
        elif roll < english + 0.07:
            digits = number(rng)
            words.append(digits.translate(FA_DIGITS) if rng.random() < 0.6 else digits)
        elif roll < english + 0.1:
            words.append(extra(rng))
        else:
            words.append(zipf(rng, FA))
        if rng.random() < 0.06:
            words[-1] += "،"
    return " ".join(words) + rng.choice(FA_PUNCT)


def zh_sentence(rng: random.Random, english: float = 0.0) -> str:
    parts: list[str] = []
    for _ in range(rng.randrange(4, 20)):
        roll = rng.random()
        if roll < english:
            parts.append(f" {zipf(rng, EN[20:])} ")
        elif roll < english + 0.06:
            parts.append(number(rng))
        elif roll < english + 0.08:
            parts.append(f" {extra(rng)} ")
        else:
            parts.append(zipf(rng, ZH))
        if rng.random() < 0.07:
            parts.append(rng.choice(["，", "，", "、", "「", "」", "（", "）", "《", "》"]))
    return "".join(parts).strip().replace("  ", " ") + rng.choice(ZH_PUNCT)


IDENTS = """total count items value result index name path data line row user config buffer
width height offset retries timeout payload cache queue node parent child weight score""".split()
FUNCS = ["load", "parse", "render", "fetch", "update", "compute", "flush", "resolve", "emit"]


def snippet(rng: random.Random) -> str:
    a, b, c = rng.sample(IDENTS, 3)
    f = rng.choice(FUNCS)
    n = rng.randrange(1, 500)
    kind = rng.randrange(5)
    if kind == 0:
        body = [
            f"def {f}_{a}({b}, {c}={n}):",
            f"    {a} = [x * {c} for x in {b} if x > {n // 2}]",
            f"    if not {a}:",
            f'        raise ValueError("empty {a}")',
            f"    return sum({a}) / len({a})",
        ]
        return "```python\n" + "\n".join(body) + "\n```"
    if kind == 1:
        body = [
            f"function {f}({a}, {b}) {{",
            f"  const {c} = {a}.map((x) => x + {n});",
            f"  for (let i = 0; i < {c}.length; i++) {{",
            f"    if ({c}[i] === {b}) return i;",
            "  }",
            "  return -1;",
            "}",
        ]
        return "```js\n" + "\n".join(body) + "\n```"
    if kind == 2:
        return (
            f"```sh\n$ grep -rn '{a}' src/ | wc -l\n{n}\n$ ./{f}.sh --{b}={n} --{c} > out.log\n```"
        )
    if kind == 3:
        return (
            f"```sql\nSELECT {a}, COUNT(*) AS {b}\nFROM {c}s\nWHERE {a} > {n}\n"
            f"GROUP BY {a}\nORDER BY {b} DESC;\n```"
        )
    obj = {a: n, b: [rng.randrange(100) for _ in range(rng.randrange(1, 5))], c: {"ok": True}}
    return "```json\n" + json.dumps(obj, indent=2) + "\n```"


def inline_code(rng: random.Random) -> str:
    a = rng.choice(IDENTS)
    return rng.choice([f"`{a}`", f"`{rng.choice(FUNCS)}({a})`", f"`{a}.{rng.choice(IDENTS)}`"])


def code_message(rng: random.Random) -> str:
    parts: list[str] = []
    for _ in range(rng.randrange(2, 6)):
        if rng.random() < 0.45:
            parts.append(snippet(rng))
        else:
            sentence = en_sentence(rng)
            words = sentence.split(" ")
            words.insert(rng.randrange(len(words)), inline_code(rng))
            parts.append(" ".join(words))
    return "\n\n".join(parts)


def layout(rng: random.Random, sentences: list[str], joiner: str) -> str:
    """Paragraphs, lists and blank lines."""
    out: list[str] = []
    style = rng.randrange(3)
    for i, sentence in enumerate(sentences):
        if style == 1:
            out.append(f"{rng.choice(['-', '*', f'{i + 1}.'])} {sentence}\n")
        elif style == 2 and rng.random() < 0.3:
            out.append(sentence + "\n\n")
        else:
            out.append(sentence + joiner)
    return "".join(out).strip()


def message(rng: random.Random, lang: str) -> str:
    if lang == "code":
        return code_message(rng)
    n = rng.randrange(2, 14)
    if lang == "en":
        return layout(rng, [en_sentence(rng) for _ in range(n)], " ")
    if lang == "fa":
        return layout(rng, [fa_sentence(rng) for _ in range(n)], " ")
    if lang == "fa+en":
        return layout(rng, [fa_sentence(rng, english=0.25) for _ in range(n)], " ")
    if lang == "zh":
        return layout(rng, [zh_sentence(rng) for _ in range(n)], "")
    return layout(rng, [zh_sentence(rng, english=0.2) for _ in range(n)], "")


def build() -> list[dict[str, str]]:
    rng = random.Random(SEED)
    rows = []
    for lang in ("fa", "zh", "en", "fa+en", "zh+en", "code"):
        for _ in range(PER_LANG):
            rows.append({"lang": lang, "source": "generated", "text": message(rng, lang)})
    return rows


def main() -> None:
    lines = [json.dumps(row, ensure_ascii=False) for row in build()]
    (HERE / "generated.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
