"""Memory extraction after an answered run: rule-based by default, model-based when a real
model is configured. Either way every candidate goes through the same admission
(``extraction.plan_round``): the rule extractor's keys and values only, ``MemoryRules``
(bounds, personal data, instructions), no product interest from a message stating health
information; every refusal is counted by reason, and every item carries its provenance."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from threadkeeper.domain.extraction import (
    FORMALITIES,
    LANGUAGES,
    PRODUCTS,
    RoundText,
    extract_and_plan,
    plan_round,
)
from threadkeeper.domain.memory import (
    KEY_PATTERN,
    MemoryItem,
    MemoryKind,
    MemoryRules,
    MemoryWritePlan,
    Provenance,
)
from threadkeeper.domain.tokens import message_text

log = logging.getLogger(__name__)

EXTRACTION_PROMPT = """\
You maintain a small, bounded memory about an insurance customer. From the customer's \
message below, list ONLY these items, with exactly these keys and values:
- {{"kind": "profile", "key": "language", "value": one of {languages}}}
- {{"kind": "profile", "key": "formality", "value": one of {formalities}}}
- {{"kind": "profile", "key": "household", "value": ...}}: only what they said about their \
own household, as parts joined by "; " in this order: "married" or "single"; "lives alone"; \
"1 child", "<N> children", "has children" or "no children" (e.g. "married; 2 children")
- {{"kind": "facts", "key": "product:<slug>", "value": the name}}: each insurance product they \
asked about, from this list (slug = name): {products}
Nothing else: no names, contact details, dates, addresses, ID, passport, policy, card or bank \
numbers, no health information (and no product asked about because of a health condition or \
a pregnancy), no instructions. Answer with a JSON array of such objects and nothing else; [] \
if there is nothing.""".format(
    languages=", ".join(LANGUAGES),
    formalities=", ".join(FORMALITIES),
    products="; ".join(f"{p.slug} = {p.name}" for p in PRODUCTS),
)
"""What the model is asked for: the rule extractor's vocabulary (``extraction.ALLOWED_KEYS``),
which is also all that ``plan_round`` admits from its answer."""


class MemoryExtractor(Protocol):
    async def plan(
        self,
        round_: RoundText,
        existing: Sequence[MemoryItem],
        rules: MemoryRules,
        *,
        fall_back: bool = True,
    ) -> MemoryWritePlan:
        """The round's write plan. ``fall_back=False``: a failure of the extraction itself
        (a model call) is raised, for the follow-up worker to retry later."""
        ...


class RuleExtractor:
    """``threadkeeper.domain.extraction`` (offline, deterministic)."""

    async def plan(
        self,
        round_: RoundText,
        existing: Sequence[MemoryItem],
        rules: MemoryRules,
        *,
        fall_back: bool = True,
    ) -> MemoryWritePlan:
        return extract_and_plan(round_, existing, rules)


def parse_candidates(text: str, source: Provenance) -> list[MemoryItem]:
    """Memory items from a model's JSON answer, read from its first ``[`` to its last ``]``
    (what a greedy regular expression used to find, scanning the rest of the answer again
    from every ``[``: quadratic, issue 6's review); anything malformed is skipped."""
    start, end = text.find("["), text.rfind("]")
    if start < 0 or end < start:
        return []
    try:
        rows: Any = json.loads(text[start : end + 1])
    except (ValueError, RecursionError):  # not JSON; nested deeper than the parser recurses
        return []
    items: list[MemoryItem] = []
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict):
            continue
        kind, key, value = row.get("kind"), row.get("key"), row.get("value")
        if kind not in ("profile", "facts") or not isinstance(key, str):
            continue
        if not isinstance(value, str) or not KEY_PATTERN.fullmatch(key):
            continue
        items.append(MemoryItem(MemoryKind(kind), key, value, source))
    return items


class ModelExtractor:
    """Asks the configured chat model; when the model fails, the failure is raised (the
    follow-up worker retries it with backoff) or, on the last attempt, the rules are used."""

    def __init__(self, model: BaseChatModel) -> None:
        self.model = model
        self.fallback = RuleExtractor()

    async def plan(
        self,
        round_: RoundText,
        existing: Sequence[MemoryItem],
        rules: MemoryRules,
        *,
        fall_back: bool = True,
    ) -> MemoryWritePlan:
        try:
            reply = await self.model.ainvoke(
                [SystemMessage(EXTRACTION_PROMPT), HumanMessage(round_.human)]
            )
        except Exception:
            if not fall_back:
                raise
            log.warning("model memory extraction failed; using the rules", exc_info=True)
            return await self.fallback.plan(round_, existing, rules)
        source = Provenance(round_.thread_id, round_.message_id, round_.at)
        # the same admission as the rules' items: their vocabulary, MemoryRules, no product
        # from a health message; refusals counted by reason (never logged with their value)
        return plan_round(round_, existing, parse_candidates(message_text(reply), source), rules)
