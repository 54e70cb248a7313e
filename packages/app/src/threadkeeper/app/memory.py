"""Memory extraction after an answered run: rule-based by default, model-based when a real
model is configured. Either way every candidate goes through ``MemoryRules`` (bounds,
personal-data refusal) and carries its provenance."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import HumanMessage, SystemMessage

from threadkeeper.domain.extraction import RoundText, extract_and_plan
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
message below, list ONLY: their language (key "language", value fa|zh|en), their formality \
(key "formality", value formal|informal), household context they volunteered about \
themselves (key "household", a short English summary), and insurance products they asked \
about (kind "facts", key "product:<slug>", value the product's English name). Never include \
names, ID numbers, card or bank numbers, health conditions or anything else. Answer with a \
JSON array of {"kind": "profile"|"facts", "key": ..., "value": ...} and nothing else; [] if \
there is nothing."""


class MemoryExtractor(Protocol):
    async def plan(
        self, round_: RoundText, existing: Sequence[MemoryItem], rules: MemoryRules
    ) -> MemoryWritePlan: ...


class RuleExtractor:
    """``threadkeeper.domain.extraction`` (offline, deterministic)."""

    async def plan(
        self, round_: RoundText, existing: Sequence[MemoryItem], rules: MemoryRules
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
    """Asks the configured chat model; falls back to the rules when the model fails."""

    def __init__(self, model: BaseChatModel) -> None:
        self.model = model
        self.fallback = RuleExtractor()

    async def plan(
        self, round_: RoundText, existing: Sequence[MemoryItem], rules: MemoryRules
    ) -> MemoryWritePlan:
        try:
            reply = await self.model.ainvoke(
                [SystemMessage(EXTRACTION_PROMPT), HumanMessage(round_.human)]
            )
        except Exception:
            log.warning("model memory extraction failed; using the rules", exc_info=True)
            return await self.fallback.plan(round_, existing, rules)
        source = Provenance(round_.thread_id, round_.message_id, round_.at)
        return rules.plan(existing, parse_candidates(message_text(reply), source))
