"""Builds ``fit_extra.jsonl``: more FIT material, for the weights only, made from FIT sources.

Run from the repository root (deterministic)::

    .venv/bin/python tests/data/token_corpus/build_fit_extra.py

It draws only on the FIT split (``sources/fit/*.txt`` and FIT's slot fillers in
``build_corpus.py``) and on the code snippets below, written for fitting; it shares no text with
HELD-OUT or with EVAL (``eval/``), and was written after EVAL was frozen, without looking at
EVAL's texts. Three kinds of message per language (``fa``, ``zh``, ``en``, ``fa+en``, ``zh+en``):

* ``scrambled``: FIT words (fa / en: split at spaces; zh: random 1-3 character pieces) in random
  order, so that o200k finds fewer merges than in real sentences;
* ``numbers``: FIT sentences with many numbers of many shapes (ASCII and Persian digits, long
  and short runs, separators, decimals);
* ``layout``: FIT sentences as markdown: headings, bullets, bold, blank lines, indentation;

and ``code`` messages: FIT English sentences mixed with fenced and inline code (C, Go, Rust,
Kotlin, Python, shell, YAML, HTML, CSS, Makefile; 2-, 4-, 8-space and tab indentation).
"""

from __future__ import annotations

import importlib.util
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 99_120_331
PER_KIND = 24

_spec = importlib.util.spec_from_file_location("build_corpus", HERE / "build_corpus.py")
assert _spec is not None
assert _spec.loader is not None
corpus = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus)

FA_DIGITS = str.maketrans("0123456789.,", "۰۱۲۳۴۵۶۷۸۹٫٬")

SNIPPETS = [
    """#include <stdio.h>

int main(void) {
    char buf[256];
    while (fgets(buf, sizeof buf, stdin) != NULL) {
        printf("%zu\\n", strlen(buf));
    }
    return 0;
}""",
    """func sum(xs []int) (total int) {
\tfor _, x := range xs {
\t\ttotal += x
\t}
\treturn
}""",
    """impl Display for Premium {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:.2}", self.currency, self.amount)
    }
}""",
    """data class Claim(val id: String, val amount: Double)

fun totals(claims: List<Claim>): Map<String, Double> =
    claims.groupBy { it.id.take(3) }
        .mapValues { (_, v) -> v.sumOf { it.amount } }""",
    """class Retry:
    def __init__(self, attempts=3, delay=0.5):
        self.attempts = attempts
        self.delay = delay

    def __call__(self, fn):
        def wrapper(*args, **kwargs):
            for i in range(self.attempts):
                try:
                    return fn(*args, **kwargs)
                except OSError:
                    time.sleep(self.delay * 2 ** i)
            raise RuntimeError("gave up")
        return wrapper""",
    """for f in ./reports/*.pdf; do
  size=$(stat -c %s "$f")
  if [ "$size" -gt 1048576 ]; then
    echo "large: $f ($size bytes)"
  fi
done""",
    """services:
  web:
    image: nginx:1.27
    ports:
      - "8080:80"
    volumes:
      - ./site:/usr/share/nginx/html:ro
  worker:
    build: .
    environment:
      - QUEUE_URL=redis://cache:6379/0""",
    """<ul class="nav">
  <li><a href="/claims">Claims</a></li>
  <li><a href="/policies" class="active">Policies</a></li>
  <li><a href="/help">Help</a></li>
</ul>""",
    """.card {
  display: flex;
  gap: 0.75rem;
  padding: 12px 16px;
  border-radius: 8px;
  box-shadow: 0 1px 3px rgba(0, 0, 0, 0.12);
}""",
    """build: deps
\tgo build -o bin/app ./cmd/app

test:
\tgo test -race ./...

.PHONY: build test""",
    """SELECT p.policy_no, SUM(c.amount) AS paid
  FROM policies AS p
  JOIN claims AS c USING (policy_id)
 WHERE c.status = 'PAID' AND c.paid_at >= DATE '2024-01-01'
 GROUP BY p.policy_no
HAVING SUM(c.amount) > 10000;""",
    """const res = await fetch(`/api/v2/claims/${id}`, {
  method: "PATCH",
  headers: { "Content-Type": "application/json" },
  body: JSON.stringify({ status: "closed", note }),
});
if (!res.ok) throw new Error(await res.text());""",
]
INLINE = [
    "`git rebase -i HEAD~3`",
    "`npm ci`",
    "`pytest -k claims -x`",
    "`SELECT 1`",
    "`None`",
    "`kubectl get pods -n prod`",
    "`self.amount`",
    "`--dry-run`",
    "`ValueError`",
    "`{policy_id}`",
    "`0x1F`",
    "`~/.config/app.toml`",
]


def number(rng: random.Random) -> str:
    kind = rng.randrange(8)
    if kind == 0:
        return str(rng.randrange(100))
    if kind == 1:
        return f"{rng.randrange(10**3, 10**9):,}"
    if kind == 2:
        return "".join(rng.choice("0123456789") for _ in range(rng.randrange(5, 17)))
    if kind == 3:
        return f"{rng.uniform(0, 1000):.{rng.randrange(1, 4)}f}"
    if kind == 4:
        return f"{rng.randrange(1300, 1410)}/{rng.randrange(1, 13)}/{rng.randrange(1, 31)}"
    if kind == 5:
        return f"{rng.randrange(1, 60)}:{rng.randrange(60):02}:{rng.randrange(60):02}"
    if kind == 6:
        return f"{rng.randrange(1, 100)}x{rng.randrange(1, 100)}"
    return f"{rng.randrange(10, 99)}-{rng.randrange(100, 999)}-{rng.randrange(1000, 9999)}"


class Maker:
    def __init__(self) -> None:
        self.rng = random.Random(SEED)
        self.pools = corpus.load_pools("fit")
        self.fillers = corpus.slot_fillers("fit")

    def sentence(self, pool: str) -> str:
        line = self.rng.choice(self.pools[pool])
        return str(corpus.fill(line, self.fillers, self.rng, corpus.EMOJI["fit"]))

    def pool_for(self, lang: str) -> str:
        names = [name for name, _ in corpus.MIXES[lang]]
        weights = [weight for _, weight in corpus.MIXES[lang]]
        return str(self.rng.choices(names, weights)[0])

    def sentences(self, lang: str, n: int) -> list[str]:
        return [self.sentence(self.pool_for(lang)) for _ in range(n)]

    def scrambled(self, lang: str) -> str:
        pieces: list[str] = []
        for text in self.sentences(lang, self.rng.randrange(3, 10)):
            if lang.startswith("zh") and " " not in text:
                i = 0
                while i < len(text):
                    n = self.rng.randrange(1, 4)
                    pieces.append(text[i : i + n])
                    i += n
            else:
                pieces.extend(text.split(" "))
        self.rng.shuffle(pieces)
        glue = "" if lang == "zh" else " "
        return glue.join(pieces)

    def numbers(self, lang: str) -> str:
        out = []
        for text in self.sentences(lang, self.rng.randrange(2, 8)):
            words = text.split(" ")
            for _ in range(self.rng.randrange(1, 5)):
                value = number(self.rng)
                if lang.startswith("fa") and self.rng.random() < 0.5:
                    value = value.translate(FA_DIGITS)
                words.insert(self.rng.randrange(len(words) + 1), value)
            out.append(" ".join(words))
        return " ".join(out)

    def layout(self, lang: str) -> str:
        lines = [f"{'#' * self.rng.randrange(1, 4)} {self.sentence(self.pool_for(lang))[:40]}"]
        for text in self.sentences(lang, self.rng.randrange(3, 9)):
            roll = self.rng.random()
            if roll < 0.35:
                lines.append(f"- {text}")
            elif roll < 0.5:
                lines.append(f"  * **{text[:12]}** {text[12:]}")
            elif roll < 0.65:
                lines.append(f"> {text}")
            else:
                lines.append(f"\n{text}")
        return "\n".join(lines)

    def code(self) -> str:
        parts = []
        for _ in range(self.rng.randrange(2, 6)):
            if self.rng.random() < 0.4:
                lang = self.rng.choice(["c", "go", "rust", "kotlin", "python", "sh", "yaml"])
                parts.append(f"```{lang}\n{self.rng.choice(SNIPPETS)}\n```")
            else:
                words = self.sentence(self.rng.choice(["en.formal", "en.chat"])).split(" ")
                words.insert(self.rng.randrange(len(words) + 1), self.rng.choice(INLINE))
                parts.append(" ".join(words))
        return "\n\n".join(parts)


def build() -> list[dict[str, str]]:
    maker = Maker()
    rows = []
    for lang in ("fa", "zh", "en", "fa+en", "zh+en"):
        for kind in ("scrambled", "numbers", "layout"):
            for _ in range(PER_KIND):
                text = getattr(maker, kind)(lang)
                rows.append({"lang": lang, "source": f"fit_extra.{kind}", "text": text})
    for _ in range(3 * PER_KIND):
        rows.append({"lang": "code", "source": "fit_extra.code", "text": maker.code()})
    return rows


def main() -> None:
    lines = [json.dumps(row, ensure_ascii=False) for row in build()]
    (HERE / "fit_extra.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(len(lines), "messages")


if __name__ == "__main__":
    main()
