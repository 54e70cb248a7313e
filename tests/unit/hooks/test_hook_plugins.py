"""Hook plugins found the way a third-party package registers them -- an installed
distribution with an entry point in the ``threadkeeper.hooks`` group, found through
``importlib.metadata`` -- and ``THREADKEEPER_HOOKS`` from the environment reaching
``build_pipeline`` when the app is composed.

The fake distribution is a real ``*.dist-info`` directory (``METADATA`` and
``entry_points.txt``) beside its module on ``sys.path``: nothing in the pipeline is patched.
"""

from __future__ import annotations

import os
import sys
import textwrap
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver

from tests.support.scripted_model import ScriptedChatModel
from threadkeeper.app import container as composition
from threadkeeper.app.config import load_settings
from threadkeeper.app.container import make_container
from threadkeeper.app.service import Caller, RunMessage, RunRequest
from threadkeeper.domain.tokens import CharacterCounter
from threadkeeper.hooks import DEFAULT_HOOKS, HookConfigError, HookSettings, build_pipeline
from threadkeeper.hooks.pipeline import ENTRY_POINT_GROUP, available_hooks

PLUGIN_SOURCE = '''
"""A third-party hook: records the ids of the messages each model call is shown."""

from langchain.agents.middleware import AgentMiddleware

SEEN = []


class AuditMiddleware(AgentMiddleware):
    def __init__(self, settings):
        super().__init__()
        self.settings = settings

    @classmethod
    def from_settings(cls, settings):
        return cls(settings)

    @property
    def name(self):
        return "audit"

    def wrap_model_call(self, request, handler):
        SEEN.append([m.id for m in request.messages])
        return handler(request)

    async def awrap_model_call(self, request, handler):
        SEEN.append([m.id for m in request.messages])
        return await handler(request)
'''


@dataclass
class InstalledPlugin:
    hook: str
    module_name: str

    @property
    def module(self) -> ModuleType:
        return sys.modules[self.module_name]

    @property
    def seen(self) -> list[list[str]]:
        seen: list[list[str]] = self.module.SEEN
        return seen


@pytest.fixture
def installed_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[InstalledPlugin]:
    """A distribution ``acme-audit-hook`` providing the hook ``audit``, installed on sys.path."""
    module_name = f"acme_audit_hook_{uuid.uuid4().hex[:8]}"
    site = tmp_path / "site-packages"
    site.mkdir()
    (site / f"{module_name}.py").write_text(PLUGIN_SOURCE, encoding="utf-8")
    dist_info = site / "acme_audit_hook-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: acme-audit-hook\nVersion: 1.0\n", encoding="utf-8"
    )
    (dist_info / "entry_points.txt").write_text(
        textwrap.dedent(
            f"""\
            [{ENTRY_POINT_GROUP}]
            audit = {module_name}:AuditMiddleware
            """
        ),
        encoding="utf-8",
    )
    monkeypatch.syspath_prepend(str(site))  # also invalidates the import caches
    yield InstalledPlugin("audit", module_name)
    sys.modules.pop(module_name, None)


def config(thread: str = "t") -> RunnableConfig:
    return {"configurable": {"thread_id": thread}}


# --- discovery through the entry-point group ---------------------------------------------------


def test_an_installed_plugin_is_discovered_beside_the_builtin_hooks(
    installed_plugin: InstalledPlugin,
) -> None:
    hooks = available_hooks()
    assert {"truncate_tool_results", "summarize", "trim", "compact", "audit"} <= set(hooks)
    assert hooks["audit"].__module__ == installed_plugin.module_name


def test_a_plugin_is_unknown_until_it_is_installed() -> None:
    assert "audit" not in available_hooks()
    with pytest.raises(HookConfigError, match="unknown hook"):
        build_pipeline(
            "audit,trim", HookSettings(counter=CharacterCounter()), allow_destructive=False
        )


async def test_a_discovered_plugin_runs_inside_a_real_agent(
    installed_plugin: InstalledPlugin,
) -> None:
    settings = HookSettings(budget=120, counter=CharacterCounter())
    # no ``plugins=``: the pipeline finds "audit" through importlib.metadata
    chain = build_pipeline("trim,audit", settings, allow_destructive=False)
    assert [m.name for m in chain] == ["trim", "audit"]
    model = ScriptedChatModel(default="ok")
    agent = create_agent(
        model, system_prompt="Be brief.", middleware=chain, checkpointer=InMemorySaver()
    )
    for turn in range(4):
        message = HumanMessage(f"question {turn} " * 3, id=f"h{turn}")
        await agent.ainvoke({"messages": [message]}, config())
    # the plugin, inside trim, saw exactly what the model was shown: the trimmed window
    assert installed_plugin.seen == [[m.id for m in call[1:]] for call in model.calls]
    assert len(installed_plugin.seen[-1]) < 7, "trim ran before the plugin"
    assert installed_plugin.seen[-1][-1] == "h3"


# --- THREADKEEPER_HOOKS, from the environment to build_pipeline --------------------------------


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """No ``THREADKEEPER_*`` variable but an embedded data directory and a quick counter."""
    for name in list(os.environ):
        if name.startswith("THREADKEEPER_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("THREADKEEPER_DATA_DIR", str(tmp_path / "var"))
    monkeypatch.setenv("THREADKEEPER_TOKENIZER", "estimate")
    return monkeypatch


@dataclass
class PipelineSpy:
    specs: list[Any]
    names: list[list[str]]


@pytest.fixture
def pipeline_spy(monkeypatch: pytest.MonkeyPatch) -> PipelineSpy:
    """Records what the composition root passes to the real ``build_pipeline``."""
    spy = PipelineSpy([], [])
    real = build_pipeline  # what the composition root imports

    def recording(spec: Any, settings: HookSettings, **kwargs: Any) -> list[Any]:
        spy.specs.append(spec)
        chain = real(spec, settings, **kwargs)
        spy.names.append([m.name for m in chain])
        return chain

    monkeypatch.setattr(composition, "build_pipeline", recording)
    return spy


async def test_threadkeeper_hooks_reaches_build_pipeline_and_its_plugin_runs(
    clean_environment: pytest.MonkeyPatch,
    pipeline_spy: PipelineSpy,
    installed_plugin: InstalledPlugin,
) -> None:
    clean_environment.setenv("THREADKEEPER_HOOKS", "truncate_tool_results, summarize ,audit,trim")
    container = make_container(load_settings())  # reads os.environ
    try:
        service = await container.service()  # type: ignore[misc]
        assert pipeline_spy.specs == ["truncate_tool_results, summarize ,audit,trim"]
        assert pipeline_spy.names == [["truncate_tool_results", "summarize", "audit", "trim"]]
        # one real run through the composed agent: the plugin named in the environment runs
        run = await service.start_run(
            Caller("acme", "u1"),
            "thread-1",
            RunRequest(RunMessage("How do I renew my policy?", id="m-1")),
        )
        body = msgspec.to_builtins(await run.result())
        await service.wait_idle()
    finally:
        await container.shutdown_resources()  # type: ignore[misc]
    assert body["status"] in ("answered", "clarifying", "escalate")
    assert installed_plugin.seen, "the plugin named in THREADKEEPER_HOOKS never ran"
    assert installed_plugin.seen[0][-1] == "m-1", "the plugin saw the run's human message"


async def test_without_threadkeeper_hooks_the_profile_default_is_built(
    clean_environment: pytest.MonkeyPatch, pipeline_spy: PipelineSpy
) -> None:
    container = make_container(load_settings())
    try:
        await container.service()  # type: ignore[misc]
    finally:
        await container.shutdown_resources()  # type: ignore[misc]
    assert pipeline_spy.specs == [DEFAULT_HOOKS]
    assert pipeline_spy.names == [["truncate_tool_results", "summarize", "trim"]]


async def test_the_environment_wins_over_the_config_file(
    clean_environment: pytest.MonkeyPatch, pipeline_spy: PipelineSpy, tmp_path: Path
) -> None:
    file = tmp_path / "threadkeeper.yaml"
    file.write_text("THREADKEEPER_HOOKS: truncate_tool_results,trim\n", encoding="utf-8")
    clean_environment.setenv("THREADKEEPER_CONFIG", str(file))
    assert load_settings().hook_names() == "truncate_tool_results,trim"
    clean_environment.setenv("THREADKEEPER_HOOKS", "trim")
    container = make_container(load_settings())
    try:
        await container.service()  # type: ignore[misc]
    finally:
        await container.shutdown_resources()  # type: ignore[misc]
    assert pipeline_spy.specs == ["trim"]
    assert pipeline_spy.names == [["trim"]]


async def test_an_unknown_hook_in_the_environment_stops_start_up(
    clean_environment: pytest.MonkeyPatch, pipeline_spy: PipelineSpy
) -> None:
    clean_environment.setenv("THREADKEEPER_HOOKS", "trim,not_installed")
    container = make_container(load_settings())
    try:
        with pytest.raises(HookConfigError, match="not_installed"):
            await container.service()  # type: ignore[misc]
    finally:
        await container.shutdown_resources()  # type: ignore[misc]
    assert pipeline_spy.specs == ["trim,not_installed"]
    assert pipeline_spy.names == []
