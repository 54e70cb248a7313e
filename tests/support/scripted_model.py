"""A chat model that answers from a script and records exactly what it was shown.

A real ``BaseChatModel`` (so ``create_agent`` binds tools and runs middleware as with any
provider), not a mock: each call pops the next scripted reply; a callable reply computes one
from the messages it received.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from pydantic import Field

Reply = AIMessage | Callable[[list[BaseMessage]], AIMessage]


class ScriptedChatModel(BaseChatModel):
    script: list[Reply] = Field(default_factory=list)
    default: str = "ok"
    calls: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        self.calls.append(list(messages))
        reply: Reply = self.script.pop(0) if self.script else AIMessage(content=self.default)
        message = reply(list(messages)) if callable(reply) else reply
        return ChatResult(generations=[ChatGeneration(message=message.model_copy())])
