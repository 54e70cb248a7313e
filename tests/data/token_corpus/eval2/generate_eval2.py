"""Writes ``markov.jsonl``: a third EVAL source, made before any fitting of the new model.

Run from the repository root (deterministic)::

    .venv/bin/python tests/data/token_corpus/eval2/generate_eval2.py

A design unlike both ``build_corpus.py`` (whole insurance sentences recombined) and
``eval/generate_eval.py`` (a Zipf word sampler): a seeded Markov chain over hand-written seed
text (``seeds_*.txt`` beside this file, written for this source only: a trail guide, a bicycle
repair answer, a museum audio guide, a tenants' notice, a lab procedure, a podcast transcript;
student, gaming and sprint chat with English terms in Persian; a weekly report, a game chat, a
cosmetics review, a seminar note and a café review with English terms in Chinese; answers to
programming questions). Words (fa, en, fa+en: order 2) or characters and ASCII runs (zh,
zh+en: order 3) follow the seed text's own transitions, backing off to one token less of
context now and then and ending a paragraph where the chain comes round a loop, so the text is
locally natural but recombined. ``code`` messages mix chain prose with fenced snippets from
``SNIPPETS`` (Ruby, Java, C#, PHP, Lua, TypeScript, Swift, Elixir, R, TOML, Dockerfile:
languages the other sources barely use), identifiers and numbers drawn per message, inline code
spans and error lines.
"""

from __future__ import annotations

import json
import math
import random
import re
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
SEED = 20_261_202
PER_LANG = 40
BACKOFF = 0.15
SEEDS = {
    "en": "seeds_en.txt",
    "fa": "seeds_fa.txt",
    "zh": "seeds_zh.txt",
    "fa+en": "seeds_fa_en.txt",
    "zh+en": "seeds_zh_en.txt",
    "code": "seeds_code.txt",
}
#: Languages chained by characters (and runs of ASCII letters and digits), the rest by words.
BY_CHAR = {"zh", "zh+en"}
_CHAR_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9.%/+\-_&']*|\s|.")
BOS, EOS = "\x02", "\x03"

NAMES = ["order", "invoice", "user", "session", "ticket", "basket", "report", "shipment",
         "account", "device", "payload", "booking", "parcel", "playlist", "sensor"]  # fmt: skip
FIELDS = ["total", "status", "createdAt", "owner_id", "retries", "label", "weight",
          "expires", "region", "score", "priority", "checksum"]  # fmt: skip

SNIPPETS = [
    (
        "ruby",
        """class @Cls@Service
  def initialize(repo)
    @repo = repo
  end

  def overdue(days: @NUM@)
    @repo.all.select { |@var@| @var@.@field@ < Time.now - days * 86_400 }
  end
end""",
    ),
    (
        "java",
        """public List<@Cls@> load@Cls@s(Connection conn) throws SQLException {
    List<@Cls@> out = new ArrayList<>();
    String sql = "SELECT id, @field@ FROM @var@s WHERE id > ?";
    try (PreparedStatement ps = conn.prepareStatement(sql)) {
        ps.setLong(1, @NUM@L);
        try (ResultSet rs = ps.executeQuery()) {
            while (rs.next()) {
                out.add(new @Cls@(rs.getLong("id"), rs.getString("@field@")));
            }
        }
    }
    return out;
}""",
    ),
    (
        "csharp",
        """public async Task<IActionResult> Get(int id)
{
    var @var@ = await _db.@Cls@s.FindAsync(id);
    if (@var@ is null)
    {
        return NotFound();
    }
    _logger.LogInformation("Loaded {Id} with @field@={Value}", id, @var@.@Field@);
    return Ok(@var@);
}""",
    ),
    (
        "php",
        """<?php
function @var@_summary(array $rows): array {
    $out = [];
    foreach ($rows as $row) {
        $key = $row['@field@'] ?? 'unknown';
        $out[$key] = ($out[$key] ?? 0) + 1;
    }
    arsort($out);
    return array_slice($out, 0, @NUM@, true);
}""",
    ),
    (
        "lua",
        """local function retry(fn, attempts)
  attempts = attempts or @NUM@
  for i = 1, attempts do
    local ok, err = pcall(fn)
    if ok then return true end
    print(string.format("attempt %d failed: %s", i, err))
  end
  return false
end""",
    ),
    (
        "typescript",
        """interface @Cls@ {
  id: string;
  @field@: number;
  tags?: string[];
}

export function by@Field@(items: @Cls@[], min = @NUM@): @Cls@[] {
  return items.filter((x) => x.@field@ >= min).sort((a, b) => b.@field@ - a.@field@);
}""",
    ),
    (
        "swift",
        """struct @Cls@: Codable {
    let id: UUID
    var @field@: Int
}

func decode@Cls@(from data: Data) throws -> @Cls@ {
    let decoder = JSONDecoder()
    decoder.keyDecodingStrategy = .convertFromSnakeCase
    return try decoder.decode(@Cls@.self, from: data)
}""",
    ),
    (
        "elixir",
        """defmodule @Cls@Worker do
  use GenServer

  def handle_info(:tick, state) do
    Process.send_after(self(), :tick, @NUM@)
    {:noreply, %{state | @field@: state.@field@ + 1}}
  end
end""",
    ),
    (
        "r",
        """@var@s <- read.csv("@var@s.csv", stringsAsFactors = FALSE)
summary(@var@s$@field@)
fit <- lm(@field@ ~ region + month, data = @var@s)
plot(fit, which = 1)
quantile(@var@s$@field@, probs = c(0.5, 0.95), na.rm = TRUE)""",
    ),
    (
        "toml",
        """[tool.@var@]
timeout = @NUM@
retries = 3
endpoints = ["https://api.example.org/v2/@var@s", "https://backup.example.org/v2/@var@s"]

[tool.@var@.logging]
level = "debug"
format = "%(asctime)s %(levelname)s %(message)s\"""",
    ),
    (
        "dockerfile",
        """FROM python:3.12-slim
WORKDIR /srv/@var@
COPY requirements.txt .
RUN pip install --no-cache-dir -r requirements.txt
COPY . .
ENV @FIELD@_LIMIT=@NUM@
CMD ["gunicorn", "-w", "4", "-b", "0.0.0.0:8000", "@var@.app:app"]""",
    ),
]
ERRORS = [
    "TypeError: Cannot read properties of undefined (reading '@field@')",
    "java.lang.NullPointerException: @var@ is null at @Cls@Service.load(@Cls@Service.java:@NUM@)",
    "NoMethodError (undefined method `@field@' for nil:NilClass)",
    "System.InvalidOperationException: Sequence contains no elements",
    "** (KeyError) key :@field@ not found in: %{id: @NUM@}",
    'PHP Warning:  Undefined array key "@field@" in /var/www/@var@.php on line @NUM@',
]


def tokens_of(lang: str, line: str) -> list[str]:
    if lang in BY_CHAR:
        return _CHAR_TOKEN.findall(line)
    return line.split()


class Chain:
    """An order-``order`` Markov chain over the lines of one seed file."""

    def __init__(self, lang: str, order: int) -> None:
        self.lang, self.order = lang, order
        self.next: dict[tuple[str, ...], list[str]] = defaultdict(list)
        self.short: dict[tuple[str, ...], list[str]] = defaultdict(list)
        text = (HERE / SEEDS[lang]).read_text(encoding="utf-8")
        for line in text.splitlines():
            if not line.strip():
                continue
            seq = [BOS] * order + tokens_of(lang, line) + [EOS]
            for i in range(order, len(seq)):
                self.next[tuple(seq[i - order : i])].append(seq[i])
                self.short[tuple(seq[i - order + 1 : i])].append(seq[i])

    def paragraph(self, rng: random.Random, limit: int) -> str:
        state = [BOS] * self.order
        out: list[str] = []
        window = self.order + (6 if self.lang in BY_CHAR else 3)
        seen: set[tuple[str, ...]] = set()
        while len(out) < limit:
            recent = tuple(out[-window:])
            if len(recent) == window:
                if recent in seen:  # the chain has come round a loop: end the paragraph
                    del out[-window:]
                    break
                seen.add(recent)
            key = tuple(state[-self.order :])
            choices = self.next[key]
            if rng.random() < BACKOFF and key[0] != BOS:
                choices = self.short[key[1:]] or choices
            token = rng.choice(choices)
            if token == EOS:
                break
            out.append(token)
            state.append(token)
        return ("" if self.lang in BY_CHAR else " ").join(out).strip()


def target_length(rng: random.Random) -> int:
    return round(math.exp(rng.uniform(math.log(120), math.log(1800))))


def prose(chain: Chain, rng: random.Random, length: int) -> str:
    parts: list[str] = []
    size = 0
    limit = 400 if chain.lang in BY_CHAR else 120
    starts: set[str] = set()
    while size < length:
        para = chain.paragraph(rng, limit)
        if not para or (para[:24] in starts and rng.random() < 0.9):
            continue  # mostly no paragraph twice from the same start in one message
        starts.add(para[:24])
        parts.append(para)
        size += len(para) + 2
    seps = [rng.choice(["\n\n", "\n\n", "\n", " "]) for _ in parts[1:]]
    return parts[0] + "".join(sep + p for sep, p in zip(seps, parts[1:], strict=True))


def fill(template: str, rng: random.Random) -> str:
    var, field = rng.choice(NAMES), rng.choice(FIELDS)
    plain = field.replace("_", "")
    return (
        template.replace("@Cls@", var.capitalize())
        .replace("@var@", var)
        .replace("@Field@", plain[:1].upper() + plain[1:])
        .replace("@FIELD@", field.upper())
        .replace("@field@", field)
        .replace("@NUM@", str(rng.choice([3, 5, 10, 30, 250, 1000, 5000, 86_400])))
    )


def code_message(chain: Chain, rng: random.Random) -> str:
    parts = [prose(chain, rng, rng.randint(80, 500))]
    for _ in range(rng.choice([1, 1, 1, 2])):
        lang, snippet = rng.choice(SNIPPETS)
        if rng.random() < 0.4:
            parts.append(f"`{fill(rng.choice(ERRORS), rng)}`")
        parts.append(f"```{lang}\n{fill(snippet, rng)}\n```")
        tail = prose(chain, rng, rng.randint(60, 300))
        if rng.random() < 0.5:
            tail = f"Note that `{fill('@var@.@field@', rng)}` may be empty here. " + tail
        parts.append(tail)
    return "\n\n".join(parts)


def build() -> list[dict[str, str]]:
    rng = random.Random(SEED)
    rows: list[dict[str, str]] = []
    for lang in SEEDS:
        chain = Chain(lang, 3 if lang in BY_CHAR else 2)
        for _ in range(PER_LANG):
            if lang == "code":
                text = code_message(chain, rng)
            else:
                text = prose(chain, rng, target_length(rng))
            rows.append({"lang": lang, "source": "markov", "text": text})
    return rows


def main() -> None:
    lines = [json.dumps(row, ensure_ascii=False) for row in build()]
    (HERE / "markov.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
