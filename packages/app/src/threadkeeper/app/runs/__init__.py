"""The run service (``ThreadService``), by job: starting a run (``service``), executing it
(``execute``), its outcome (``outcome``), the memory it teaches (``remember``) and the
handles its caller holds (``handles``); reads and deletions are ``app.stored``."""

from threadkeeper.app.runs.handles import CompletedRun, LiveRun
from threadkeeper.app.runs.service import RUN_TIMEOUT_SECONDS, SHUTDOWN_GRACE_SECONDS, RunService

__all__ = ["RUN_TIMEOUT_SECONDS", "SHUTDOWN_GRACE_SECONDS", "CompletedRun", "LiveRun", "RunService"]
