"""``threadkeeper replay``: exactly what the model was sent in each model call of a stored run."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from typing import Any

from threadkeeper.app.cli.common import _run_on_storage, _settings, _stored_user
from threadkeeper.app.config import (
    Settings,
)


async def _replay(settings: Settings, args: argparse.Namespace) -> int:
    from threadkeeper.app.service import Caller
    from threadkeeper.app.storage import open_stored

    async with open_stored(settings) as stored:
        replay = await stored.replay(
            Caller(args.tenant, _stored_user(args.user)), args.thread, args.run
        )
    if replay is None:
        print(
            f"threadkeeper: no run {args.run} in thread {args.thread} of user {args.user} "
            f"in tenant {args.tenant} (--user and --tenant say whose thread to look in)",
            file=sys.stderr,
        )
        return 1
    for line in _replay_lines(replay.record, replay.messages):
        print(line)
    return 0


def _replay_lines(record: Any, by_id: dict[str, Any]) -> Iterator[str]:
    yield json.dumps(
        {
            "run_id": record.run_id,
            "status": record.status,
            "prompt_version": record.prompt_version,
            "chunk_ids": list(record.chunk_ids),
            "memory_keys": list(record.memory_keys),
        },
        ensure_ascii=False,
    )
    for call in _model_call_windows(record, by_id):
        yield json.dumps(call, ensure_ascii=False, default=str)


def _model_call_windows(record: Any, by_id: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """What each model call of a run was sent (``replay``'s lines, ``export-runs``'s
    ``model_calls``): the system prompt (its documents rendered again), the summary, the
    window's messages by id, a message no longer kept as ``{"role": "missing"}``."""
    from langchain_core.messages import AIMessage

    from threadkeeper.domain.compaction import shown_message

    prompt = _with_documents(record)
    for index, call in enumerate(record.model_calls):
        system = prompt
        if call.summary:
            system = f"{system}\n\n{call.summary}"
        messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
        for message_id in call.message_ids:
            message = shown_message(message_id, by_id)
            if message is None:
                messages.append({"role": "missing", "id": message_id})
                continue
            item: dict[str, Any] = {
                "role": message.type,
                "id": message_id,
                "content": message.content,
            }
            if isinstance(message, AIMessage) and message.tool_calls:
                item["tool_calls"] = message.tool_calls
            messages.append(item)
        yield {
            "model_call": index,
            "tokens": call.tokens,
            "budget": call.budget,
            "counter": call.counter,
            "messages": messages,
        }


_loaded: dict[str, Any] = {}


def _knowledge() -> Any:
    """The knowledge base's documents, loaded once per command (the search index is lazy)."""
    if "knowledge" not in _loaded:
        from threadkeeper.adapters.knowledge import KnowledgeBase

        _loaded["knowledge"] = KnowledgeBase.from_directory()
    return _loaded["knowledge"]


def _with_documents(record: Any) -> str:
    """The run's system prompt with its documents block rendered again from the knowledge base
    (the record stores their ``chunk_ids``, not their text); a chunk the knowledge base no
    longer has is shown as missing. The knowledge base is loaded only for such a prompt."""
    from threadkeeper.app.stored import chunk_lookup
    from threadkeeper.domain.prompt import DOCUMENTS_REF, prompt_as_sent

    prompt: str = record.system_prompt
    if not prompt.endswith(DOCUMENTS_REF):
        return prompt
    return prompt_as_sent(prompt, record.chunk_ids, chunk_lookup(_knowledge(), record.tenant_id))


def cmd_replay(args: argparse.Namespace) -> int:
    settings = _settings()
    return int(_run_on_storage(settings, _replay(settings, args)))
