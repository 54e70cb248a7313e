"""``EstimatingCounter`` against exact ``o200k_base`` counts, and its edge cases.

Its goal is **budget safety** (issue 28): the windows ``TurnWindowPolicy`` chooses with the safe
count (the default, ``THREADKEEPER_TOKENIZER=estimate``) stay within their budget in exact
o200k tokens on at least 99.9 % of model calls over every committed corpus; the over-count that
costs is reported per language and source (``over_count_table``, docs/token-estimator.md).

The fitted point estimate under it (``safe=False``) keeps its accuracy tests: on
``tests/data/token_corpus/heldout.jsonl`` (overall) and on the three EVAL sources (per source and
language; the unmet groups are strict xfails): the weights were fitted on the FIT files only,
which share no text with them (checked below). No timing is asserted here; speed is
``benchmarks/test_bench_estimator.py``.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
from collections.abc import Callable
from pathlib import Path

import pytest
from langchain_core.messages import AIMessage, HumanMessage

from threadkeeper.domain.errors import ContextOverflow, MessageTooLarge
from threadkeeper.domain.estimate import (
    BYTE_CLASSES,
    CLASS_WEIGHTS,
    CONSTANT,
    PAIR_WEIGHTS,
    PERSIAN_CHARS,
    PERSIAN_CLASSES,
    PERSIAN_WEIGHTS,
    SAFETY_PERCENT,
    SCALE,
    EstimatingCounter,
)
from threadkeeper.domain.history import TurnWindowPolicy, window_tokens
from threadkeeper.domain.tokens import MESSAGE_FRAMING, TiktokenCounter, TokenCounter

CORPUS = Path(__file__).resolve().parents[2] / "data" / "token_corpus"
LANGS = ("fa", "zh", "en", "fa+en", "zh+en")
#: The published claims (docs/token-estimator.md), per message of >= 200 characters.
MAX_MEAN_ERROR = 0.05
MAX_P95_ERROR = 0.12


def load(split: str) -> list[dict[str, str]]:
    lines = (CORPUS / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def p95(values: list[float]) -> float:
    return statistics.quantiles(values, n=20, method="inclusive")[18]


PAGE = dict(zip(PERSIAN_CHARS, PERSIAN_CLASSES, strict=True))


def reference(text: str) -> int:
    """The estimator's arithmetic written plainly: Python-level sums, no table, codec or zlib."""
    if not text:
        return 0
    if text.isspace():
        return max(1, len(text) // 16)
    other = sum(1 for char in text if not char.isascii() and char not in PAGE)
    if "\u0627" in text and other * 8 <= len(text):  # Arabic script: by the code page's classes
        total = PERSIAN_WEIGHTS["fa_space"] - CONSTANT  # its own word-start weight
        for char in text:
            if char == " ":
                total += PERSIAN_WEIGHTS["fa_space"]
            elif char.isascii():
                total += CLASS_WEIGHTS[BYTE_CLASSES[ord(char)]]
            elif char in PAGE:
                total += PERSIAN_WEIGHTS[PAGE[char]]
            else:
                total += PERSIAN_WEIGHTS["other"]
    else:  # a weight per UTF-8 byte, and the Persian-digit pair
        data = text.encode("utf-8", "surrogatepass")
        total = sum(CLASS_WEIGHTS[BYTE_CLASSES[byte]] for byte in data)
        persian_digits = sum(1 for char in text if "\u06f0" <= char <= "\u06f9")
        total += PAIR_WEIGHTS["persian_digit"] * persian_digits
    if "```" in text:
        total += PAIR_WEIGHTS["space_pair"] * text.count("  ")
    return max(1, (total + CONSTANT + SCALE // 2) // SCALE)


@pytest.fixture(scope="module")
def estimate() -> EstimatingCounter:
    """The fitted point estimate (what the accuracy tests measure)."""
    return EstimatingCounter(safe=False)


@pytest.fixture(scope="module")
def safe() -> EstimatingCounter:
    """The budget-safe count (the default)."""
    return EstimatingCounter()


@pytest.fixture(scope="module")
def exact() -> TiktokenCounter:
    return TiktokenCounter("o200k_base")


@pytest.fixture(scope="module")
def heldout_errors(estimate: EstimatingCounter, exact: TiktokenCounter) -> dict[str, list[float]]:
    """Signed relative errors (estimate - exact) / exact per language, and ``"all"``."""
    errors: dict[str, list[float]] = {lang: [] for lang in (*LANGS, "all")}
    for row in load("heldout"):
        truth = exact.count_text(row["text"])
        error = (estimate.count_text(row["text"]) - truth) / truth
        errors[row["lang"]].append(error)
        errors["all"].append(error)
    return errors


def breakdown(errors: dict[str, list[float]]) -> str:
    lines = ["lang    n  mean|err|  p95|err|   bias"]
    for lang, signed in errors.items():
        absolute = [abs(e) for e in signed]
        lines.append(
            f"{lang:6} {len(signed):3}  {statistics.fmean(absolute):8.2%}  {p95(absolute):8.2%}"
            f"  {statistics.fmean(signed):+6.2%}"
        )
    return "\n".join(lines)


# --- accuracy on HELD-OUT -------------------------------------------------------------------


def test_heldout_mean_relative_error_is_at_most_5_percent(
    heldout_errors: dict[str, list[float]],
) -> None:
    mean = statistics.fmean(abs(e) for e in heldout_errors["all"])
    assert mean <= MAX_MEAN_ERROR, f"mean {mean:.2%}\n{breakdown(heldout_errors)}"


def test_heldout_p95_relative_error_is_at_most_12_percent(
    heldout_errors: dict[str, list[float]],
) -> None:
    worst = p95([abs(e) for e in heldout_errors["all"]])
    assert worst <= MAX_P95_ERROR, f"p95 {worst:.2%}\n{breakdown(heldout_errors)}"


def test_heldout_covers_every_language(heldout_errors: dict[str, list[float]]) -> None:
    assert all(len(heldout_errors[lang]) >= 40 for lang in LANGS), breakdown(heldout_errors)


# --- accuracy on EVAL: two independent sources per language, made before fitting ---------------

EVAL = CORPUS / "eval"
EVAL2 = CORPUS / "eval2"
#: Each EVAL source and its file: ``markov`` (eval2/) was written and hashed after the other two
#: had been looked at during fitting, and before the model that followed them was fitted.
EVAL_FILES = {
    "handwritten": EVAL / "handwritten.jsonl",
    "generated": EVAL / "generated.jsonl",
    "markov": EVAL2 / "markov.jsonl",
}
EVAL_SOURCES = tuple(EVAL_FILES)
EVAL_LANGS = (*LANGS, "code")
#: SHA-256 of the EVAL files as written before any weight was fitted (tests/data/token_corpus/
#: README.md): a changed file would no longer be the corpus the weights never saw.
EVAL_SHA256 = {
    EVAL / "handwritten.jsonl": "e4ae93452f21e0c1f11093dc2fca463dda8fa2d462d4a4bb4629429824223cd7",
    EVAL / "generated.jsonl": "2666789f53ce84623b8efeb20685abbf48f4453926073478712ea41750f4f9cd",
    EVAL / "generate_eval.py": "71bf7c584de2d5009183d0018d8474f263d1c28c8646f8926cf42a14e988e76a",
    EVAL2 / "markov.jsonl": "bd797871189f4e6c5ddabbe620b8d2fc0d3c592b6bbd1de4f995fe82444c8be4",
    EVAL2 / "generate_eval2.py": "b4209800343ae4a0c67c3ecda5249f7b8275952d14f050670921ceabaf0d61eb",
    EVAL2 / "seeds_code.txt": "2eedf1a6f2fe5a0c2fe4270f1971b0546dde71c6c19ab92c5c3588b2dbf01c05",
    EVAL2 / "seeds_en.txt": "3e7683c3a013bb0a49f0cb47ffd71ac3cb443633d3dacb17dc7eef64ccd4de69",
    EVAL2 / "seeds_fa.txt": "8643ec19b93072b0985d219c62cdc2a7417445af778d4928e9d53bd90d76a884",
    EVAL2 / "seeds_fa_en.txt": "8766e6ce7b2670596e8d098544b94ace29041eb72ed2322d737ae1f82a5f28da",
    EVAL2 / "seeds_zh.txt": "d1603eeafddb1f078602edd4b9681e1d8fd539378e3c0b5e61b11e57802fc82f",
    EVAL2 / "seeds_zh_en.txt": "d21b18bef871c65d2bc9f519fd3dccf25bca5dba5f1dd736f6f95cffe7676a0b",
}
#: (source, lang) groups where the current weights do NOT meet the bounds (mean / p95 measured
#: by ``fit_estimator.py --eval``; docs/token-estimator.md). Strict: a fix makes them XPASS.
#: 6 of 18; the weights before this round missed 12 of 18.
EVAL_UNMET = {
    ("handwritten", "zh"): "mean 7.0%, p95 13.9%",
    ("handwritten", "zh+en"): "mean 6.5%, p95 12.2% (over-counts, +4.7%)",
    ("handwritten", "code"): "mean 6.2%, p95 15.6%",
    ("generated", "zh"): "mean 8.7%, p95 16.3% (word salad: fewer Han merges, -8.7%)",
    ("generated", "zh+en"): "mean 5.2%, p95 14.3%",
    ("markov", "zh"): "mean 6.4% (recombined characters: fewer Han merges, -6.4%)",
}


def load_eval(source: str) -> list[dict[str, str]]:
    lines = EVAL_FILES[source].read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def eval_errors(
    estimate: EstimatingCounter, exact: TiktokenCounter
) -> dict[tuple[str, str], list[float]]:
    """Signed relative errors per (source, lang) on the EVAL corpora."""
    errors: dict[tuple[str, str], list[float]] = {}
    for source in EVAL_SOURCES:
        for row in load_eval(source):
            truth = exact.count_text(row["text"])
            error = (estimate.count_text(row["text"]) - truth) / truth
            errors.setdefault((source, row["lang"]), []).append(error)
    return errors


def _eval_case(source: str, lang: str) -> object:
    reason = EVAL_UNMET.get((source, lang))
    marks = [pytest.mark.xfail(reason=f"not met: {reason}", strict=True)] if reason else []
    return pytest.param(source, lang, marks=marks, id=f"{source}-{lang}")


@pytest.mark.parametrize(
    ("source", "lang"), [_eval_case(s, lang) for s in EVAL_SOURCES for lang in EVAL_LANGS]
)
def test_eval_mean_and_p95_per_language_and_source(
    eval_errors: dict[tuple[str, str], list[float]], source: str, lang: str
) -> None:
    signed = eval_errors[(source, lang)]
    absolute = [abs(e) for e in signed]
    mean, worst = statistics.fmean(absolute), p95(absolute)
    table = breakdown({f"{s}/{g}"[:6]: v for (s, g), v in eval_errors.items() if s == source})
    assert mean <= MAX_MEAN_ERROR, f"{source}/{lang}: mean {mean:.2%} p95 {worst:.2%}\n{table}"
    assert worst <= MAX_P95_ERROR, f"{source}/{lang}: mean {mean:.2%} p95 {worst:.2%}\n{table}"


def test_eval_covers_every_language_from_two_sources() -> None:
    for source in EVAL_SOURCES:
        rows = load_eval(source)
        assert {row["source"] for row in rows} == {source}
        counts = {lang: sum(1 for row in rows if row["lang"] == lang) for lang in EVAL_LANGS}
        assert min(counts.values()) >= 12, (source, counts)


def test_eval_files_are_the_ones_frozen_before_fitting() -> None:
    import hashlib

    for path, digest in EVAL_SHA256.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, path.name


def test_eval_is_never_a_fitting_input_and_shares_no_text_with_fit() -> None:
    spec = importlib.util.spec_from_file_location("fit_estimator", CORPUS / "fit_estimator.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert not [name for name in module.FIT_FILES if "eval" in name or "heldout" in name]
    fit_texts = {
        row["text"] for name in module.FIT_FILES for row in load(name.removesuffix(".jsonl"))
    }
    eval_texts = {row["text"] for source in EVAL_SOURCES for row in load_eval(source)}
    assert not fit_texts & eval_texts


@pytest.mark.parametrize(
    ("script", "built"),
    [
        (EVAL / "generate_eval.py", lambda: load_eval("generated")),
        (EVAL2 / "generate_eval2.py", lambda: load_eval("markov")),
        (CORPUS / "build_fit_extra.py", lambda: load("fit_extra")),
    ],
    ids=["eval", "eval2", "fit_extra"],
)
def test_each_generated_file_is_rebuilt_identically(
    script: Path, built: Callable[[], list[dict[str, str]]]
) -> None:
    spec = importlib.util.spec_from_file_location(script.stem, script)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.build() == built()


# --- the corpus is what the docs say it is ---------------------------------------------------


@pytest.mark.parametrize("split", ["fit", "heldout"])
def test_corpus_messages_are_chat_sized(split: str) -> None:
    rows = load(split)
    assert {row["lang"] for row in rows} == set(LANGS)
    assert all(200 <= len(row["text"]) <= 2000 for row in rows)


def test_heldout_shares_no_sentence_with_fit() -> None:
    def sentences(split: str) -> set[str]:
        lines: set[str] = set()
        for path in (CORPUS / "sources" / split).glob("*.txt"):
            lines.update(line for line in path.read_text(encoding="utf-8").splitlines() if line)
        return lines

    fit, heldout = sentences("fit"), sentences("heldout")
    assert fit
    assert heldout
    assert not fit & heldout
    heldout_text = "\n".join(row["text"] for row in load("heldout"))
    literal = [line for line in fit if "{" not in line]  # sentences without slots
    assert not [line for line in literal if line in heldout_text]


def test_corpus_files_are_rebuilt_identically_from_their_sources() -> None:
    spec = importlib.util.spec_from_file_location("build_corpus", CORPUS / "build_corpus.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for split in ("fit", "heldout"):
        assert module.build(split) == load(split), split


# --- arithmetic -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "a",
        "hello, world",
        "سلام، وقت بخیر",
        "您好，请问理赔进度如何？",
        "x" * 5000,
        "!" * 100_000,  # punctuation: a heavy byte, many adler32 chunks
        "😀" * 30_000,  # the heaviest bytes there are
        "中" * 40_000,
        "\ud800 lone surrogate",
        "ا" * 1000 + "ب" * 60_000,  # the code page: many adler32 chunks
        "سلام 😀\ud800 café 中文 ok",  # characters the code page lacks (> 1 in 8: UTF-8)
        "سلام، وقت بخیر 😀 ok",  # one character the code page lacks
        "سلام، " + "؟" * 70_000,  # the heaviest entry of the code page
        "۰۹۱۲۳۴۵۶۷۸۹ ۱۲٬۵۰۰",  # Persian digits without an alef: the UTF-8 way's pair count
        "```\n    indented\n```",
        "```\nسلام\n    ا\n```",
    ],
    ids=lambda t: f"{t[:12]!r}x{len(t)}",
)
def test_count_text_matches_the_plain_weighted_sum(estimate: EstimatingCounter, text: str) -> None:
    assert estimate.count_text(text) == reference(text)


def test_count_text_matches_the_plain_weighted_sum_on_the_corpus(
    estimate: EstimatingCounter,
) -> None:
    rows = [row for path in sorted(CORPUS.rglob("*.jsonl")) for row in map(json.loads, path.open())]
    assert len(rows) > 1600
    assert [estimate.count_text(r["text"]) for r in rows] == [reference(r["text"]) for r in rows]


def test_the_code_page_is_ascii_plus_persian_and_every_character_has_a_class() -> None:
    assert len(PERSIAN_CHARS) == len(set(PERSIAN_CHARS)) <= 128
    assert not any(char.isascii() for char in PERSIAN_CHARS)
    assert set(PERSIAN_CLASSES) | {"fa_space", "other"} == set(PERSIAN_WEIGHTS)
    assert PAGE["\u06f5"] == PAGE["\u0665"] == "fa_digit"
    assert PAGE["\u200c"] == "zwnj"
    # a Persian digit costs the same either way: DB + B0..B9 + the pair == fa_digit
    utf8_digit = (
        CLASS_WEIGHTS["arabic_db"]
        + CLASS_WEIGHTS["continuation_b0"]
        + PAIR_WEIGHTS["persian_digit"]
    )
    assert utf8_digit == PERSIAN_WEIGHTS["fa_digit"]
    # and so does a letter: lead + continuation == its code-page class
    for char in "ابپچکگی":
        lead, cont = char.encode()
        utf8 = CLASS_WEIGHTS[BYTE_CLASSES[lead]] + CLASS_WEIGHTS[BYTE_CLASSES[cont]]
        assert abs(utf8 - PERSIAN_WEIGHTS[PAGE[char]]) <= 1, char


# --- edge cases -----------------------------------------------------------------------------


def test_empty_text_is_zero_tokens(estimate: EstimatingCounter) -> None:
    assert estimate.count_text("") == 0
    assert estimate.count_system("") == 0


@pytest.mark.parametrize(
    "char",
    ["a", "Z", "7", ".", " ", "\n", "ش", "۵", "\u200c", "中", "。", "，", "é", "ж", "한", "😀"],
)
def test_a_single_character_is_one_to_three_tokens(estimate: EstimatingCounter, char: str) -> None:
    assert 1 <= estimate.count_text(char) <= 3


@pytest.mark.parametrize("text", [" ", "\t", " " * 100, "\n" * 50, "\t" * 40, " \n" * 100])
def test_pure_whitespace_is_few_tokens_but_never_zero(
    estimate: EstimatingCounter, text: str
) -> None:
    # o200k packs runs of one whitespace character into long tokens; the estimate allows one
    # token per 16 whitespace characters (it under-counts alternating spaces and newlines).
    assert 1 <= estimate.count_text(text) <= max(1, len(text) // 16)


@pytest.mark.parametrize("text", ["7", "42", "2024", "09121234567", "1234567890" * 10])
def test_ascii_digits_are_over_rather_than_under_counted(
    estimate: EstimatingCounter, exact: TiktokenCounter, text: str
) -> None:
    # o200k splits digit runs into groups of three: ceil(n / 3) tokens. Chat numbers are short
    # (and a space before a number is a token of its own), so the fitted weight is ~0.47 token
    # per digit; long runs are over-counted by up to ~40% (3 x 0.47 per 3-digit token).
    truth = exact.count_text(text)
    assert truth <= estimate.count_text(text) <= 1.45 * truth + 1


def test_persian_digits_within_30_percent(
    estimate: EstimatingCounter, exact: TiktokenCounter
) -> None:
    # a Persian digit is ~1 token in o200k; the persian_digit pair count prices it so (it used to
    # be weighed like a Persian letter, 1/4, and this was a known limit)
    text = "۰۹۱۲۳۴۵۶۷۸۹ ۱۲٬۵۰۰٬۰۰۰ ۱۴۰۳/۰۵/۱۲"
    assert abs(estimate.count_text(text) - exact.count_text(text)) <= 0.3 * exact.count_text(text)


@pytest.mark.parametrize(
    "text", ["😀", "🙏🙏🙏", "👍🏽", "👨\u200d👩\u200d👧", "❤️", "✅", "😀" * 10]
)
def test_emoji_alone_are_counted_at_most_three_times_over(
    estimate: EstimatingCounter, exact: TiktokenCounter, text: str
) -> None:
    # An emoji in chat text costs ~2.5 tokens (it breaks the merges around it; measured on the
    # corpus), so emoji on their own, often one token each, are over- but never under-counted.
    truth = exact.count_text(text)
    assert truth <= estimate.count_text(text) <= 3 * truth


def test_a_100k_character_text_is_estimated_like_its_parts(
    estimate: EstimatingCounter, exact: TiktokenCounter
) -> None:
    parts: list[str] = []
    for row in load("heldout"):
        parts.append(row["text"])
        if sum(len(p) + 1 for p in parts) >= 100_000:
            break
    text = "\n".join(parts)[:100_000]
    assert len(text) == 100_000
    whole = estimate.count_text(text)
    truth = exact.count_text(text)
    assert abs(whole - truth) <= MAX_MEAN_ERROR * truth
    pieces = sum(estimate.count_text(p) for p in "\n".join(parts).split("\n"))
    assert abs(whole - pieces) <= 0.01 * pieces + len(parts)


def test_concatenation_is_about_the_sum_of_the_parts(
    estimate: EstimatingCounter, exact: TiktokenCounter
) -> None:
    rows = load("heldout")
    errors = []
    for left, right in zip(rows[::7], rows[3::7], strict=False):
        a, b = left["text"], right["text"]
        joined = estimate.count_text(a + "\n" + b)
        parts = estimate.count_text(a) + estimate.count_text(b)
        if ("\u0627" in a) == ("\u0627" in b) or "zh" not in (left["lang"] + right["lang"]):
            # weights add up: only the rounding of each part, the newline and one CONSTANT
            assert abs(joined - parts) <= 2
        else:
            # Persian joined to Chinese is counted the UTF-8 way (the code page would drop the
            # Han), which prices Persian punctuation and ZWNJ by their bytes: close, not equal
            assert abs(joined - parts) <= 0.03 * parts
        assert joined >= max(estimate.count_text(a), estimate.count_text(b))
        truth = exact.count_text(a + "\n" + b)
        errors.append(abs(joined - truth) / truth)
    assert statistics.fmean(errors) <= MAX_MEAN_ERROR


# --- the TokenCounter port ------------------------------------------------------------------


def test_it_is_a_token_counter_named_estimate(estimate: EstimatingCounter) -> None:
    assert isinstance(estimate, TokenCounter)
    assert estimate.name == "estimate"


def test_count_adds_message_framing_and_tool_calls() -> None:
    counter = EstimatingCounter()
    text = "سلام، شماره پرونده من CLM-2024-88123 است."
    assert counter.count(HumanMessage(text, id="m1")) == MESSAGE_FRAMING + counter.count_text(text)
    call = AIMessage("", id="m2", tool_calls=[{"name": "faq", "args": {"q": "理赔"}, "id": "c1"}])
    assert counter.count(call) > MESSAGE_FRAMING


# --- budget safety ---------------------------------------------------------------------------

#: Every committed corpus: the FIT files, HELD-OUT and the three EVAL sources.
ALL_CORPORA = (
    "fit.jsonl",
    "fit_extra.jsonl",
    "fit_handwritten.jsonl",
    "fit_handwritten2.jsonl",
    "heldout.jsonl",
    "eval/generated.jsonl",
    "eval/handwritten.jsonl",
    "eval2/markov.jsonl",
)
SAFE_SHARE = 0.999
BUDGETS = (300, 800, 1500, 4000)
THREAD_MESSAGES = 12
SYSTEM = "You answer questions about the member's insurance. Cite the documents you use."


def corpus_groups() -> dict[tuple[str, str], list[str]]:
    """The texts of every corpus by (file, language), in file order."""
    groups: dict[tuple[str, str], list[str]] = {}
    for name in ALL_CORPORA:
        for line in (CORPUS / name).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            groups.setdefault((name, row["lang"]), []).append(row["text"])
    return groups


def model_calls(counter: TokenCounter, exact: TiktokenCounter) -> list[tuple[str, int, int, int]]:
    """Every model call of the simulated conversations: each (file, language) group's texts in
    order, in threads of ``THREAD_MESSAGES`` alternating human and AI messages, each human
    message a call whose window ``TurnWindowPolicy`` chooses with ``counter`` under each of
    ``BUDGETS``. (group, budget, the window's tokens by ``counter``, by ``exact``) per call;
    a newest message alone over the budget is refused, not called."""
    calls: list[tuple[str, int, int, int]] = []
    for (name, lang), texts in corpus_groups().items():
        for start in range(0, len(texts), THREAD_MESSAGES):
            thread = texts[start : start + THREAD_MESSAGES]
            for budget in BUDGETS:
                policy = TurnWindowPolicy(counter=counter)
                history: list[HumanMessage | AIMessage] = []
                for i, text in enumerate(thread):
                    kind = HumanMessage if i % 2 == 0 else AIMessage
                    history.append(kind(content=text, id=f"{name}-{lang}-{start}-{i}"))
                    if i % 2:
                        continue
                    try:
                        window = policy.window(history, budget=budget, system=SYSTEM)
                    except (MessageTooLarge, ContextOverflow):
                        continue
                    truth = window_tokens(window, exact, SYSTEM)
                    calls.append((f"{name}/{lang}", budget, window.tokens, truth))
    return calls


def test_windows_stay_within_budget_in_exact_tokens(
    safe: EstimatingCounter, exact: TiktokenCounter
) -> None:
    calls = model_calls(safe, exact)
    assert len(calls) >= 3000, "the corpora make fewer model calls than the claim is about"
    over = [(group, budget, truth) for group, budget, _, truth in calls if truth > budget]
    share = 1 - len(over) / len(calls)
    assert share >= SAFE_SHARE, f"{len(over)} of {len(calls)} windows over budget: {over[:5]}"


def test_the_point_estimate_alone_is_not_budget_safe(
    estimate: EstimatingCounter, exact: TiktokenCounter
) -> None:
    """Why the safe count exists: the fitted estimate, unbiased, lets ~1 % of windows over."""
    calls = model_calls(estimate, exact)
    over = sum(1 for _, budget, _, truth in calls if truth > budget)
    assert over / len(calls) > 1 - SAFE_SHARE


def test_the_safe_count_is_never_below_the_point_estimate(
    safe: EstimatingCounter, estimate: EstimatingCounter
) -> None:
    for texts in corpus_groups().values():
        for text in texts:
            assert safe.count_text(text) >= estimate.count_text(text)
    assert set(SAFETY_PERCENT) == {"fa", "ascii", "utf8"}
    assert all(0 <= margin <= 20 for margin in SAFETY_PERCENT.values())


@pytest.mark.parametrize("text", ["\n" * 31, "\r\n" * 50, " \n" * 8, " \t\n\r" * 250])
def test_the_safe_count_of_whitespace_is_never_under(
    safe: EstimatingCounter, exact: TiktokenCounter, text: str
) -> None:
    """Mixed whitespace is many tokens (1,000 random spaces, tabs and newlines: 786)."""
    assert safe.count_text(text) >= exact.count_text(text)


def over_count_table(safe: TokenCounter, exact: TiktokenCounter) -> str:
    """Mean over-count per language and source, per message ((safe - exact) / exact) and per
    window, and the share of windows within budget: the table of docs/token-estimator.md."""
    per_message: dict[tuple[str, str], list[float]] = {}
    for (name, lang), texts in corpus_groups().items():
        source = name.removesuffix(".jsonl")
        for text in texts:
            truth = exact.count_text(text)
            per_message.setdefault((lang, source), []).append(
                (safe.count_text(text) - truth) / truth
            )
    per_window: dict[tuple[str, str], list[tuple[int, int, int]]] = {}
    for group, budget, tokens, truth in model_calls(safe, exact):
        name, lang = group.rsplit("/", 1)
        per_window.setdefault((lang, name.removesuffix(".jsonl")), []).append(
            (budget, tokens, truth)
        )
    lines = [
        "| language | source | messages | mean over-count per message | under-counted messages "
        "| windows | mean over-count per window | windows within budget |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key in sorted(per_message):
        errors = per_message[key]
        windows = per_window.get(key, [])
        under = sum(1 for e in errors if e < 0)
        mean_window = (
            statistics.fmean((tokens - truth) / truth for _, tokens, truth in windows)
            if windows
            else float("nan")
        )
        within = sum(1 for budget, _, truth in windows if truth <= budget)
        lines.append(
            f"| {key[0]} | {key[1]} | {len(errors)} | {statistics.fmean(errors):+.1%} | {under} "
            f"| {len(windows)} | {mean_window:+.1%} | {within} of {len(windows)} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":  # the table of docs/token-estimator.md
    print(over_count_table(EstimatingCounter(), TiktokenCounter("o200k_base")))
