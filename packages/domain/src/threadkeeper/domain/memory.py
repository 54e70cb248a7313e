"""Cross-thread memory rules: what may be remembered about a user, where, and with what origin.

Memory is extraction-based and bounded, never "append every message" (ADR-0007). A candidate
is refused when it carries personal data that must not outlive a turn (national IDs, payment
details, health information — see ``pii``), when it is too long, or when it has no provenance.
Refusals are counted by reason; the refused value is never stored or logged.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

import msgspec

from threadkeeper.domain.pii import find_personal_data


class MemoryKind(StrEnum):
    PROFILE = "profile"
    """Single-valued preferences and context (language, formality, household)."""
    FACTS = "facts"
    """A bounded set of things the user asked about or mentioned (products, topics)."""


def store_label(value: str) -> str:
    """An id as a store namespace label: LangGraph's stores refuse ``.`` in labels, and ids
    may hold dots but never ``:``, so ``.`` → ``:`` keeps distinct ids distinct."""
    return value.replace(".", ":")


def user_namespace(tenant_id: str, user_id: str) -> tuple[str, ...]:
    """``(tenant_id, "user", user_id)``: the prefix of everything remembered about a user."""
    return (store_label(tenant_id), "user", store_label(user_id))


def memory_namespace(tenant_id: str, user_id: str, kind: MemoryKind) -> tuple[str, ...]:
    """``(tenant_id, "user", user_id, kind)`` — the tenant leads, as ADR-0002 requires."""
    return (*user_namespace(tenant_id, user_id), kind.value)


class Provenance(msgspec.Struct, frozen=True):
    """Where a remembered item came from."""

    thread_id: str
    message_id: str
    at: datetime


class MemoryItem(msgspec.Struct, frozen=True):
    kind: MemoryKind
    key: str
    value: str
    source: Provenance


class Refusal(StrEnum):
    EMPTY = "empty"
    TOO_LONG = "too_long"
    MULTILINE = "multiline"
    BAD_KEY = "bad_key"
    NO_PROVENANCE = "no_provenance"
    # one reason per personal-data kind, prefixed so metrics read "personal_data:health"
    PERSONAL_DATA = "personal_data"


KEY_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.:-]{0,63}$")


@dataclass(frozen=True, slots=True)
class MemoryWritePlan:
    """What to write to the store: upserts, evictions, and refusal counts (never values)."""

    puts: tuple[MemoryItem, ...]
    deletes: tuple[tuple[MemoryKind, str], ...]
    refused: Counter[str] = field(default_factory=Counter)


@dataclass(frozen=True, slots=True)
class MemoryRules:
    """Admission, bounds and eviction of remembered items."""

    max_facts: int = 50
    max_value_chars: int = 200

    def refusal(self, item: MemoryItem) -> str | None:
        """Why ``item`` may not be remembered, or ``None`` if it may."""
        if not KEY_PATTERN.fullmatch(item.key):
            return Refusal.BAD_KEY.value
        value = item.value.strip()
        if not value:
            return Refusal.EMPTY.value
        if len(value) > self.max_value_chars:
            return Refusal.TOO_LONG.value
        if len(value.splitlines()) > 1:
            # one item is one line of the system prompt's <memory> block: a line break in a
            # value could forge the block's end (and what run records redact on reset)
            return Refusal.MULTILINE.value
        if not item.source.thread_id or not item.source.message_id:
            return Refusal.NO_PROVENANCE.value
        # key and value apart: joined, a digit at the key's end would hide a number's start
        hits = find_personal_data(value) or find_personal_data(item.key)
        if hits:
            return f"{Refusal.PERSONAL_DATA.value}:{hits[0].kind.value}"
        return None

    def plan(
        self, existing: Sequence[MemoryItem], candidates: Iterable[MemoryItem]
    ) -> MemoryWritePlan:
        """Upsert admitted candidates; evict the oldest facts beyond ``max_facts``.

        A candidate equal in value to what is stored is not rewritten. Later candidates for the
        same key win.
        """
        refused: Counter[str] = Counter()
        current = {(i.kind, i.key): i for i in existing}
        puts: dict[tuple[MemoryKind, str], MemoryItem] = {}
        for candidate in candidates:
            reason = self.refusal(candidate)
            if reason is not None:
                refused[reason] += 1
                continue
            item = msgspec.structs.replace(candidate, value=candidate.value.strip())
            slot = (item.kind, item.key)
            stored = current.get(slot)
            if stored is not None and stored.value == item.value:
                puts.pop(slot, None)
                continue
            puts[slot] = item
        merged = {**current, **puts}
        facts = sorted(
            (i for i in merged.values() if i.kind is MemoryKind.FACTS),
            key=lambda i: (i.source.at, i.key),
        )
        evict = facts[: max(0, len(facts) - self.max_facts)]
        deletes = tuple((i.kind, i.key) for i in evict)
        evicted = set(deletes)
        return MemoryWritePlan(
            puts=tuple(i for slot, i in puts.items() if slot not in evicted),
            deletes=tuple(d for d in deletes if d in current),
            refused=refused,
        )
