"""Cross-thread memory rules: what may be remembered about a user, where, and with what origin.

Memory is extraction-based and bounded, never "append every message" (ADR-0007). A candidate
is refused when it carries personal data that must not outlive a turn (national IDs, payment
details, health information, names, contact details, dates of birth, addresses, passport and
policy numbers — see ``pii``; or a key that names such data), when it holds an instruction
(``instructions``: an item is replayed into every later system prompt of its user), when it
is too long, or when it has no provenance. Refusals are counted by reason; the refused value
is never stored or logged.

What keys and values memory holds at all is the rule extractor's vocabulary, which every
extractor's candidates must also fit (``extraction.plan_round``).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Final

import msgspec

from threadkeeper.domain.instructions import is_instruction
from threadkeeper.domain.pii import (
    PersonalDataKind,
    find_identifying_data,
    find_personal_data,
)


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
    INSTRUCTION = "instruction"
    """The value tells a model what to do (``instructions.is_instruction``)."""
    KEY_NOT_ALLOWED = "key_not_allowed"
    """Not a key the rule extractor writes (``extraction.ALLOWED_KEYS``)."""
    VALUE_NOT_ALLOWED = "value_not_allowed"
    """Not a value of its key's vocabulary (``extraction.canonical_value``)."""
    HEALTH_CONTEXT = "health_context"
    """A product interest proposed from a message that states health information."""


KEY_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_.:-]{0,63}$")

# A key segment (between "." and ":") that names personal data: the item would hold it, so it
# is refused as that data whatever its value ("name": "on file").
_PERSONAL_KEYS: Final = tuple(
    (re.compile(pattern), kind)
    for pattern, kind in (
        (r"(?:(?:full|first|last|given|family|middle|maiden|nick|sur|user|real)[_-]?)?names?",
         PersonalDataKind.NAME),
        (r"e[_-]?mail(?:[_-]?address)?|mail[_-]?address", PersonalDataKind.EMAIL),
        (r"(?:(?:mobile|cell|home|work)[_-]?)?(?:phone|telephone|tel|mobile|cell|whatsapp)"
         r"(?:[_-]?(?:number|no|num))?|contact[_-]?(?:number|no)", PersonalDataKind.PHONE),
        (r"dob|birth(?:day|date|[_-]?date)?|date[_-]?of[_-]?birth|born(?:[_-]?on)?",
         PersonalDataKind.DATE_OF_BIRTH),
        (r"(?:(?:home|postal|street|mailing|billing|residential)[_-]?)?address|street|postcode"
         r"|post[_-]?code|zip(?:[_-]?code)?", PersonalDataKind.ADDRESS),
        (r"passport(?:[_-]?(?:number|no|num|id))?", PersonalDataKind.PASSPORT),
        (r"policy[_-]?(?:number|no|num|id)|member(?:ship)?[_-]?(?:number|no|id)",
         PersonalDataKind.POLICY_NUMBER),
        (r"(?:national|citizen)[_-]?(?:id|code|number|no)|ssn|id[_-]?(?:number|card|no)|melli"
         r"|ric", PersonalDataKind.NATIONAL_ID),
        (r"(?:health|medical)[_-]?(?:condition|conditions|history|record|records|status)"
         r"|conditions?|diagnos[ie]s|medications?|medicines?|illness(?:es)?|diseases?"
         r"|symptoms?|allerg(?:y|ies)|pregnan(?:t|cy)|disabilit(?:y|ies)",
         PersonalDataKind.HEALTH),
    )
)  # fmt: skip


def personal_key(key: str) -> PersonalDataKind | None:
    """The kind of personal data a key names by one of its segments (``user.first-name``:
    a name), or ``None``."""
    for segment in re.split(r"[.:]", key):
        for pattern, kind in _PERSONAL_KEYS:
            if pattern.fullmatch(segment):
                return kind
    return None


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
        hits = (
            find_personal_data(value)
            or find_identifying_data(value)
            or find_personal_data(item.key)
            or find_identifying_data(item.key)
        )
        if hits:
            return f"{Refusal.PERSONAL_DATA.value}:{hits[0].kind.value}"
        named = personal_key(item.key)
        if named is not None:
            return f"{Refusal.PERSONAL_DATA.value}:{named.value}"
        if is_instruction(value):
            return Refusal.INSTRUCTION.value
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
