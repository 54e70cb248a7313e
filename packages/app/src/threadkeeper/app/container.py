"""The composition root's container: settings in, a running service out.

The settings are one typed ``Settings`` (``providers.Object``); the profile is the registry's
entry of ``settings.profile`` (``app.storage`` over ``adapters.profiles``), its backend a
``Resource`` opened and closed with the application (the Litestar lifespan).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dependency_injector import containers, providers
from langchain_core.language_models import BaseChatModel

from threadkeeper.adapters.builtin_model import BuiltinChatModel
from threadkeeper.adapters.knowledge import KnowledgeBase, fetch_faq_document_tool
from threadkeeper.adapters.profile import Backend
from threadkeeper.app.agent import SYSTEM_PROMPT, build_agent, observe_event, observe_window
from threadkeeper.app.config import ConfigError, Settings
from threadkeeper.app.counters import counter_from_name
from threadkeeper.app.followups import WorkerSettings
from threadkeeper.app.memory import ModelExtractor, RuleExtractor
from threadkeeper.app.model_calls import model_call_middleware
from threadkeeper.app.runs import RunService
from threadkeeper.app.runs.fold import SummaryJob, run_system
from threadkeeper.app.storage import backend_resource
from threadkeeper.domain.memory import MemoryRules
from threadkeeper.domain.threads import ThreadScope
from threadkeeper.domain.tokens import TokenCounter
from threadkeeper.hooks import HookSettings, ModelSummarizer, build_pipeline
from threadkeeper.hooks.pipeline import parse_hook_names


def build_model(
    name: str, token_delay_ms: float, timeout_seconds: float = 30.0, variable: str = "MODEL"
) -> BaseChatModel:
    """``builtin`` or any LangChain chat model by ``init_chat_model`` string, with the
    provider client's timeout set and its own retries off (``app.model_calls`` retries)."""
    if name == "builtin":
        return BuiltinChatModel(token_delay_ms=token_delay_ms)
    from langchain.chat_models import init_chat_model

    from threadkeeper.adapters.openai_requests import send_messages_as_given

    try:
        try:
            # streaming=True: a provider streams even when nobody reads the deltas (a JSON
            # run), so a hung or cut stream is noticed the same way on both
            model = init_chat_model(
                name, timeout=timeout_seconds, max_retries=0, stream_usage=True, streaming=True
            )
            # OpenAI's client: the messages skip the SDK's per-message transform (the same
            # request, a third of a call's CPU: adapters.openai_requests)
            return send_messages_as_given(model)
        except (TypeError, ValueError):  # a provider class without these settings
            return init_chat_model(name)
    except (ImportError, ValueError) as exc:
        hint = ""
        if isinstance(exc, ImportError) and name.startswith("openai:"):
            hint = " (install the extra: uv sync --all-packages --extra openai)"
        raise ConfigError(f"THREADKEEPER_{variable}={name!r}: {exc}{hint}") from exc


def build_fallback(
    name: str | None, token_delay_ms: float, timeout_seconds: float
) -> BaseChatModel | None:
    if not name:
        return None
    return build_model(name, token_delay_ms, timeout_seconds, variable="MODEL_FALLBACK")


def unstreamed(model: BaseChatModel) -> BaseChatModel:
    """``model`` answering in one response instead of a stream, for the calls whose answer
    nobody reads as it is written — memory extraction, summary folds. A streamed answer costs
    the process a parse, a pydantic object and a LangChain chunk per token: against the fake
    provider a call took 5.5 ms of CPU streamed and 2.0 ms not. The copy shares the provider
    client (its connection pool, timeout and retries)."""
    if getattr(model, "streaming", None) is True:
        return model.model_copy(update={"streaming": False})
    return model


def summarizer_for(model_name: str, model: BaseChatModel, counter: TokenCounter) -> Any:
    """The rolling summary's writer: the configured model when it is a real one (not
    streamed: ``unstreamed``), else ``None`` (the hooks' offline extractive summarizer)."""
    return None if model_name == "builtin" else ModelSummarizer(unstreamed(model), counter)


def build_service(
    *,
    settings: Settings,
    backend: Backend,
    counter: TokenCounter,
    knowledge: KnowledgeBase,
    model: BaseChatModel,
    fallback: BaseChatModel | None = None,
) -> RunService:
    hook_settings = HookSettings(
        budget=settings.token_budget,
        counter=counter,
        summary_after_turns=settings.summary_after_turns,
        tool_result_max_chars=settings.tool_result_max_chars,
        system_prompt=SYSTEM_PROMPT,
        observer=observe_window,
        on_event=observe_event,
        summarizer=summarizer_for(settings.model, model, counter),
    )
    folds_ahead = "summarize" in parse_hook_names(settings.hook_names())
    if folds_ahead:  # folds made after a round, for the thread's next run (app.runs.fold)
        hook_settings.ahead = backend.summaries
    hooks: Sequence[Any] = build_pipeline(
        settings.hook_names(),
        hook_settings,
        allow_destructive=not settings.history_in_checkpoints,
    )
    agent = build_agent(
        model=model,
        tools=[fetch_faq_document_tool(knowledge)],
        knowledge=knowledge,
        history_hooks=hooks,
        checkpointer=backend.checkpointer,
        store=backend.store,
        model_middleware=model_call_middleware(
            timeout_seconds=settings.model_timeout_seconds,
            max_retries=settings.model_max_retries,
            fallback=fallback,
        ),
    )
    return RunService(
        agent=agent,
        backend=backend,
        counter=counter,
        budget=settings.token_budget,
        scope=ThreadScope(settings.thread_scope),
        rules=MemoryRules(max_facts=settings.memory_max_facts),
        prompt=SYSTEM_PROMPT,
        extractor=(
            RuleExtractor() if settings.model == "builtin" else ModelExtractor(unstreamed(model))
        ),
        run_timeout=settings.run_timeout_seconds,
        profile=settings.profile,
        trace_id_key=settings.trace_id_key,
        followups=WorkerSettings(
            concurrency=settings.followup_workers,
            lease_seconds=settings.followup_lease_seconds,
            prepare_seconds=settings.followup_timeout_seconds,
            max_attempts=settings.followup_max_attempts,
        ),
        summary_job=(
            SummaryJob(
                agent,
                hook_settings,
                backend.summaries,
                system_of=run_system(backend.runs, knowledge),
            )
            if folds_ahead
            else None
        ),
    )


def _model(settings: Settings) -> BaseChatModel:
    return build_model(
        settings.model, settings.model_token_delay_ms, settings.model_timeout_seconds
    )


def _fallback(settings: Settings) -> BaseChatModel | None:
    return build_fallback(
        settings.model_fallback, settings.model_token_delay_ms, settings.model_timeout_seconds
    )


def _counter(settings: Settings) -> TokenCounter:
    return counter_from_name(settings.tokenizer)


class Container(containers.DeclarativeContainer):
    settings = providers.Dependency(instance_of=Settings)

    counter = providers.Singleton(_counter, settings)
    knowledge = providers.Singleton(KnowledgeBase.from_directory)
    model = providers.Singleton(_model, settings)
    fallback = providers.Singleton(_fallback, settings)
    backend = providers.Resource(backend_resource, settings)
    service = providers.Singleton(
        build_service,
        settings=settings,
        backend=backend,
        counter=counter,
        knowledge=knowledge,
        model=model,
        fallback=fallback,
    )


def make_container(settings: Settings) -> Container:
    return Container(settings=providers.Object(settings))
