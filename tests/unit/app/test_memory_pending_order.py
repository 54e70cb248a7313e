"""``GET /v1/users/{id}/memory`` says ``pending: false`` only when the memory it returns holds
every round's facts recorded before it: the pending work is looked up *before* the memory is
read. It was read after: memory work that ended between the two reads was reported done while
the memory returned lacked what it wrote (the API suite's export test saw the user's facts
without their profile on postgres, CI 2026-12-07)."""

from __future__ import annotations

from typing import Any

from tests.unit.app.test_run_service import CALLER, request, service_with, thread
from threadkeeper.adapters.builtin_model import BuiltinChatModel
from threadkeeper.conformance.in_memory import InMemoryBackend
from threadkeeper.domain.followups import MEMORY


async def test_memory_is_read_after_pending_work_is_looked_up(memory_profile: str) -> None:
    backend = InMemoryBackend()
    service = service_with(BuiltinChatModel(), backend, memory_profile)
    handle = await service.start_run(
        CALLER, thread(), request("My name is Sara. Is dental covered?")
    )
    assert (await handle.result()).status == "answered"
    assert MEMORY in backend.followups.kinds_to_do(), "the round left memory work"
    before = await service.threads.memory(CALLER)
    read = service.threads.memory

    async def read_then_finish_the_work(caller: Any) -> Any:
        """The memory as it was, then the worker finishes its work — between the reads."""
        view = await read(caller)
        await service.worker.run_due()
        return view

    service.threads.memory = read_then_finish_the_work  # type: ignore[method-assign]
    seen = await service.memory(CALLER)
    after = await read(CALLER)
    assert after != before, "the work wrote memory"
    if not seen.pending:
        assert (seen.profile, seen.facts) == (after.profile, after.facts), (
            "said nothing was pending, but returned the memory from before the work"
        )
