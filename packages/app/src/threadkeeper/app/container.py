"""The composition root's container: configuration in, a running service out.

The profile is chosen by ``providers.Selector(config.profile, …)``; storage backends are
``Resource`` providers, opened and closed with the application (the Litestar lifespan).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Any

from dependency_injector import containers, providers
from langchain_core.language_models import BaseChatModel

from threadkeeper.adapters.atomic import AtomicSaver
from threadkeeper.adapters.embedded import open_embedded
from threadkeeper.adapters.knowledge import KnowledgeBase, fetch_faq_document_tool
from threadkeeper.app.agent import SYSTEM_PROMPT, build_agent, observe_window
from threadkeeper.app.builtin_model import BuiltinChatModel
from threadkeeper.app.config import ConfigError, Settings
from threadkeeper.app.counters import counter_from_name
from threadkeeper.app.memory import ModelExtractor, RuleExtractor
from threadkeeper.app.model_calls import model_call_middleware
from threadkeeper.app.runs import RunService
from threadkeeper.domain.memory import MemoryRules
from threadkeeper.domain.threads import ThreadScope
from threadkeeper.domain.tokens import TokenCounter
from threadkeeper.hooks import HookSettings, ModelSummarizer, build_pipeline


async def embedded_backend(data_dir: str) -> AsyncIterator[Any]:
    async with open_embedded(data_dir) as backend:
        yield backend


async def postgres_backend(url: str) -> AsyncIterator[Any]:
    from threadkeeper.adapters.postgres import SchemaNotReady, open_postgres

    try:
        async with open_postgres(url) as backend:
            yield backend
    except SchemaNotReady as exc:
        raise ConfigError(str(exc)) from exc


async def redis_mysql_backend(
    redis_url: str, mysql_url: str, checkpoint_ttl_minutes: float, lock_ttl_seconds: int
) -> AsyncIterator[Any]:
    from threadkeeper.adapters.redis_mysql import SchemaNotReady, open_redis_mysql

    try:
        async with open_redis_mysql(
            redis_url,
            mysql_url,
            checkpoint_ttl_minutes=checkpoint_ttl_minutes,
            lock_ttl_seconds=lock_ttl_seconds,
        ) as backend:
            yield backend
    except SchemaNotReady as exc:
        raise ConfigError(str(exc)) from exc


def build_model(
    name: str, token_delay_ms: float, timeout_seconds: float = 30.0, variable: str = "MODEL"
) -> BaseChatModel:
    """``builtin`` or any LangChain chat model by ``init_chat_model`` string, with the
    provider client's timeout set and its own retries off (``app.model_calls`` retries)."""
    if name == "builtin":
        return BuiltinChatModel(token_delay_ms=token_delay_ms)
    from langchain.chat_models import init_chat_model

    try:
        try:
            return init_chat_model(name, timeout=timeout_seconds, max_retries=0, stream_usage=True)
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


def summarizer_for(model_name: str, model: BaseChatModel, counter: TokenCounter) -> Any:
    """The rolling summary's writer: the configured model when it is a real one, else
    ``None`` (the hooks' offline extractive summarizer)."""
    return None if model_name == "builtin" else ModelSummarizer(model, counter)


def build_service(
    *,
    settings: Settings,
    backend: Any,
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
        summarizer=summarizer_for(settings.model, model, counter),
    )
    hooks: Sequence[Any] = build_pipeline(
        settings.hook_names(),
        hook_settings,
        allow_destructive=not settings.transcript_in_checkpoints,
    )
    saver = AtomicSaver(backend.saver)
    agent = build_agent(
        model=model,
        tools=[fetch_faq_document_tool(knowledge)],
        knowledge=knowledge,
        history_hooks=hooks,
        checkpointer=saver,
        store=backend.store,
        model_middleware=model_call_middleware(
            timeout_seconds=settings.model_timeout_seconds,
            max_retries=settings.model_max_retries,
            fallback=fallback,
        ),
    )
    return RunService(
        agent=agent,
        saver=saver,
        backend=backend,
        retention=backend.retention,
        counter=counter,
        budget=settings.token_budget,
        scope=ThreadScope(settings.thread_scope),
        rules=MemoryRules(max_facts=settings.memory_max_facts),
        prompt=SYSTEM_PROMPT,
        extractor=RuleExtractor() if settings.model == "builtin" else ModelExtractor(model),
        run_timeout=settings.run_timeout_seconds,
    )


class Container(containers.DeclarativeContainer):
    config = providers.Configuration(strict=True)
    settings = providers.Dependency(instance_of=Settings)

    counter = providers.Singleton(counter_from_name, config.tokenizer)
    knowledge = providers.Singleton(KnowledgeBase.from_directory)
    model = providers.Singleton(
        build_model, config.model, config.model_token_delay_ms, config.model_timeout_seconds
    )
    fallback = providers.Singleton(
        build_fallback,
        config.model_fallback,
        config.model_token_delay_ms,
        config.model_timeout_seconds,
    )

    backend = providers.Selector(
        config.profile,
        embedded=providers.Resource(embedded_backend, config.data_dir),
        postgres=providers.Resource(postgres_backend, config.postgres_url),
        **{
            "redis-mysql": providers.Resource(
                redis_mysql_backend,
                config.redis_url,
                config.mysql_url,
                config.checkpoint_ttl_minutes,
                config.lock_ttl_seconds,
            )
        },
    )

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
    container = Container(settings=settings)
    container.config.from_dict(settings.as_config())
    return container
