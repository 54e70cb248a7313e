"""A chat model writes the rolling summary (``THREADKEEPER_MODEL`` set to a real model).

The ``Summarizer`` the ``summarize`` and ``compact`` hooks call through their async path. The
model gets the previous summary and the messages that fell out of the window, as plain
``User:``/``Assistant:`` lines (tool calls and tool results left out, as the extractive
summarizer leaves them out), and is asked for a summary within the token limit. The result is
held to the limit by exact count: a longer reply is cut on a character boundary.

The call is made with no callbacks: it runs inside the model node, and LangGraph's
``messages`` stream would otherwise send the summary to the client as if it were the answer.
If the model fails or answers nothing, the offline extractive summarizer folds instead —
a summary is an aid to the window, never a reason to fail the run.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage

from threadkeeper.domain.summary import SUMMARY_HEADING, ExtractiveSummarizer
from threadkeeper.domain.tokens import TokenCounter, message_text

log = logging.getLogger(__name__)

INSTRUCTIONS = (
    "You maintain the running summary of a customer conversation with an insurance assistant. "
    "Fold the new messages into the previous summary. Keep what the user asked, what they "
    "told about themselves and their situation, what was answered and what is still open. "
    "Write in the language the user writes in. Plain sentences, no preamble. "
    "At most {max_tokens} tokens."
)


def transcript_lines(messages: Sequence[BaseMessage]) -> list[str]:
    """``User: …`` / ``Assistant: …`` lines of the human and AI text (no tool steps)."""
    lines: list[str] = []
    for message in messages:
        text = message_text(message).strip()
        if not text or (isinstance(message, AIMessage) and message.tool_calls):
            continue
        if isinstance(message, HumanMessage):
            lines.append(f"User: {text}")
        elif isinstance(message, AIMessage):
            lines.append(f"Assistant: {text}")
    return lines


class EmptySummary(Exception):
    """The model answered nothing to fold (``fall_back=False``)."""


class ModelSummarizer:
    """``Summarizer`` backed by a chat model; see the module docstring."""

    def __init__(self, model: BaseChatModel, counter: TokenCounter) -> None:
        self.model = model
        self.counter = counter
        self.fallback = ExtractiveSummarizer(counter)

    async def summarize(
        self,
        previous: str | None,
        messages: Sequence[BaseMessage],
        *,
        max_tokens: int,
        fall_back: bool = True,
    ) -> str:
        """The new summary. ``fall_back=False`` (a fold made ahead by follow-up work, which
        retries instead): a failed or empty model answer raises instead of folding
        extractively."""
        lines = transcript_lines(messages)
        if not lines:
            return previous or ""
        body = previous.removeprefix(SUMMARY_HEADING).strip() if previous else ""
        request = [
            SystemMessage(INSTRUCTIONS.format(max_tokens=max_tokens)),
            HumanMessage(
                (f"Previous summary:\n{body}\n\n" if body else "")
                + "New messages:\n"
                + "\n".join(lines)
            ),
        ]
        try:
            reply = await self.model.ainvoke(
                request, config={"callbacks": [], "tags": ["nostream"]}
            )
        except Exception:
            if not fall_back:
                raise
            log.warning("the model could not summarize; folding extractively", exc_info=True)
            return self.fallback.fold(previous, messages, max_tokens=max_tokens)
        text = message_text(reply).strip()
        if not text:
            if not fall_back:
                raise EmptySummary("the model answered no summary")
            return self.fallback.fold(previous, messages, max_tokens=max_tokens)
        return self._within(f"{SUMMARY_HEADING}\n{text}", max_tokens)

    def _within(self, summary: str, max_tokens: int) -> str:
        """``summary`` cut to the longest prefix that fits ``max_tokens`` (exact counts)."""
        if self.counter.count_system(summary) <= max_tokens:
            return summary
        low, high = len(SUMMARY_HEADING), len(summary)
        while low < high:  # the longest prefix length that fits
            middle = (low + high + 1) // 2
            if self.counter.count_system(summary[:middle]) <= max_tokens:
                low = middle
            else:
                high = middle - 1
        return summary[:low].rstrip()
