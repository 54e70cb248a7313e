"""threadkeeper.hooks — LangChain v1 ``AgentMiddleware`` built on threadkeeper's domain rules.

Usable in anyone's ``create_agent(middleware=[...])``; ``build_pipeline`` assembles them from
``THREADKEEPER_HOOKS``.
"""

from threadkeeper.hooks.compact import CompactMiddleware
from threadkeeper.hooks.model_summarizer import ModelSummarizer
from threadkeeper.hooks.pipeline import (
    DEFAULT_HOOKS,
    DESTRUCTIVE_DEFAULT_HOOKS,
    HookConfigError,
    available_hooks,
    build_pipeline,
)
from threadkeeper.hooks.settings import HookSettings, ThreadState
from threadkeeper.hooks.summarize import SummarizeMiddleware
from threadkeeper.hooks.trim import TrimMiddleware
from threadkeeper.hooks.truncate import TruncateToolResultsMiddleware

__all__ = [
    "DEFAULT_HOOKS",
    "DESTRUCTIVE_DEFAULT_HOOKS",
    "CompactMiddleware",
    "HookConfigError",
    "HookSettings",
    "ModelSummarizer",
    "SummarizeMiddleware",
    "ThreadState",
    "TrimMiddleware",
    "TruncateToolResultsMiddleware",
    "available_hooks",
    "build_pipeline",
]
