"""Destructive history rules (the blog design): tool-result truncation and compaction.

``truncate_tool_result`` is shared by the non-destructive hook (it changes only what the model
sees) and by the ``Compactor`` (which persists the change). A changed message gets a new id.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from threadkeeper.domain.errors import ContextOverflow, MessageTooLarge
from threadkeeper.domain.history import HistoryPolicy
from threadkeeper.domain.tokens import derive_id, message_text

TRUNCATION_MARK = "\n… [truncated {omitted} characters]"
_MARKED = re.compile(r"\n… \[truncated \d+ characters\]\Z")


def truncate_tool_result(message: ToolMessage, max_chars: int) -> ToolMessage:
    """The message itself when short enough, else a copy cut to ``max_chars`` with a new id."""
    text = message_text(message)
    if len(text) <= max_chars:
        return message
    marked = _MARKED.search(text)
    if marked is not None and marked.start() <= max_chars:
        return message  # already cut to this limit (or a smaller one): cutting is idempotent
    omitted = len(text) - max_chars
    return message.model_copy(
        update={
            "content": text[:max_chars] + TRUNCATION_MARK.format(omitted=omitted),
            "id": derive_id(message.id, f"t{max_chars}"),
        }
    )


def shown_message(message_id: str, by_id: Mapping[str, BaseMessage]) -> BaseMessage | None:
    """The message a window showed under ``message_id``: a stored message, or a stored tool
    result cut by ``truncate_tool_result`` (whose id is the stored id + ``~t<max_chars>``)."""
    found = by_id.get(message_id)
    if found is not None:
        return found
    base, _, tag = message_id.rpartition("~t")
    if not base or not tag.isdigit():
        return None
    original = shown_message(base, by_id)
    if not isinstance(original, ToolMessage):
        return None
    return truncate_tool_result(original, int(tag))


def truncate_tool_results(
    messages: Sequence[BaseMessage], max_chars: int
) -> tuple[list[BaseMessage], int]:
    """Every oversized tool result truncated; returns the list and how many were cut."""
    if not any(issubclass(kind, ToolMessage) for kind in set(map(type, messages))):
        return list(messages), 0  # no tool result (the kinds found in C, not per message)
    out: list[BaseMessage] = []
    cut = 0
    for message in messages:
        if isinstance(message, ToolMessage):
            short = truncate_tool_result(message, max_chars)
            cut += short is not message
            out.append(short)
        else:
            out.append(message)
    return out, cut


def is_empty_ai(message: BaseMessage) -> bool:
    """An AI message with no text and no tool calls — nothing a model or reader can use."""
    return (
        isinstance(message, AIMessage)
        and not message.tool_calls
        and not message_text(message).strip()
    )


@dataclass(frozen=True, slots=True)
class Compaction:
    """The messages to keep in place of the whole persisted history."""

    kept: tuple[BaseMessage, ...]
    dropped: int
    """Messages of the history that are not kept (older turns, empty AI messages, orphans)."""
    truncated: int
    """Tool results kept in shortened form."""

    @property
    def changed(self) -> bool:
        return bool(self.dropped or self.truncated)


class Compactor(Protocol):
    """Decides what a destructive profile keeps of a thread's history."""

    def compact(
        self,
        history: Sequence[BaseMessage],
        *,
        budget: int,
        system: str = "",
        summary: str | None = None,
    ) -> Compaction: ...


@dataclass(slots=True)
class WindowCompactor:
    """Keeps what the history policy would show, with tool results truncated.

    Compaction runs only when the history no longer fits ``budget`` (or holds something to
    clean); it then keeps a window of ``target`` × budget, so a thread is rewritten once every
    few turns rather than on every turn, and the model always sees at most ``budget``.
    """

    policy: HistoryPolicy
    max_tool_chars: int = 2000
    target: float = 0.75

    def compact(
        self,
        history: Sequence[BaseMessage],
        *,
        budget: int,
        system: str = "",
        summary: str | None = None,
    ) -> Compaction:
        cleaned: list[BaseMessage] = []
        cut_ids: set[str | None] = set()
        for message in history:
            if is_empty_ai(message):
                continue
            if isinstance(message, ToolMessage):
                short = truncate_tool_result(message, self.max_tool_chars)
                if short is not message:
                    cut_ids.add(short.id)
                message = short
            cleaned.append(message)
        full = self.policy.window(cleaned, budget=budget, system=system, summary=summary)
        if full.start == _first_human(cleaned) and not full.omitted:
            # Everything from the first human message fits: only clean (what precedes the
            # first human message can never be shown, so it goes too).
            kept = full.messages
            return Compaction(
                kept,
                dropped=len(history) - len(kept),
                truncated=sum(1 for m in kept if m.id in cut_ids),
            )
        try:
            window = self.policy.window(
                cleaned, budget=max(1, int(budget * self.target)), system=system, summary=summary
            )
        except (MessageTooLarge, ContextOverflow):  # the newest message needs more than target
            window = full
        if not _keeps_newest_turn(window.messages, full.messages):
            # the newest turn fits the budget but not the target: never cut into it (its tool
            # call and result are what the model asked for a moment ago)
            window = full
        kept = window.messages
        return Compaction(
            kept,
            dropped=len(history) - len(kept),
            truncated=sum(1 for m in kept if m.id in cut_ids),
        )


def _keeps_newest_turn(window: Sequence[BaseMessage], full: Sequence[BaseMessage]) -> bool:
    """Whether ``window`` holds every message ``full`` shows from its newest human message on."""
    newest = max((i for i, m in enumerate(full) if isinstance(m, HumanMessage)), default=len(full))
    shown = {id(m) for m in window}
    return all(id(m) in shown for m in full[newest:])


def _first_human(messages: Sequence[BaseMessage]) -> int:
    for index, message in enumerate(messages):
        if isinstance(message, HumanMessage):
            return index
    return len(messages)
