"""``packages/conformance/README.md`` (``docs/writing-a-backend.md``), followed step by step
with the in-memory profile: it is laid out as the guide says, registered by an entry point of a
distribution installed from outside the repository (a ``.dist-info`` on ``sys.path``), selected
by name, and
the real application serves the HTTP API on it — a run, the transcript, a deletion — with
nothing in ``app/`` knowing it."""

from __future__ import annotations

import importlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from litestar.testing import TestClient

from tests.support.installed import profile_installed
from threadkeeper.adapters import profiles
from threadkeeper.adapters.profile import Profile
from threadkeeper.app.application import create_app
from threadkeeper.app.config import Settings
from threadkeeper.conformance import in_memory
from threadkeeper.conformance.in_memory import InMemoryBackend
from threadkeeper.conformance.in_memory.settings import MemorySettings

HEADERS = {"X-Tenant-Id": "acme-insurance", "X-User-Id": "user-1"}
TOKEN = "guide-token"
DENTAL = "Is dental treatment covered by my health insurance?"


@pytest.fixture
def registered(tmp_path: Path) -> Iterator[str]:
    """The guide's registration — ``memory = "threadkeeper.conformance.in_memory"`` in the
    ``threadkeeper.profiles`` entry points of a package installed beside threadkeeper — with
    the registry's caches cleared before and after."""
    with profile_installed(tmp_path / "site", "memory", in_memory.PACKAGE):
        yield "memory"


def test_the_registry_finds_the_profile_only_once_it_is_installed(tmp_path: Path) -> None:
    assert "memory" not in profiles.registered()
    with pytest.raises(profiles.UnknownProfile, match="'memory' is not a profile"):
        profiles.profile("memory")
    with profile_installed(tmp_path / "site", "memory", in_memory.PACKAGE):
        assert {"embedded", "postgres", "redis-mysql"} < set(profiles.registered())
        assert profiles.registered()["memory"] == in_memory.PACKAGE
    assert "memory" not in profiles.registered()


def test_the_profile_is_laid_out_as_the_guide_says(registered: str) -> None:
    package = importlib.import_module(profiles.registered()[registered])
    assert isinstance(package.PROFILE, Profile)
    assert package.PROFILE.name == registered == in_memory.NAME
    settings = importlib.import_module(f"{package.__name__}.settings").SETTINGS
    assert settings is MemorySettings
    assert isinstance(settings.requires_token, bool)
    assert isinstance(settings.history_in_checkpoints, bool)
    assert profiles.profile(registered) is package.PROFILE
    assert profiles.profile_settings(registered) is MemorySettings


def test_the_profile_is_selected_by_name(registered: str) -> None:
    settings = Settings.of(profile=registered)
    assert isinstance(settings.storage, MemorySettings)
    assert settings.requires_token is False
    assert settings.history_in_checkpoints is True
    assert "memory" not in {type(s).__name__ for s in settings.unused}


async def test_the_profile_opens_a_backend() -> None:
    for archive in (False, True):
        async with in_memory.PROFILE.open(MemorySettings(memory_archive=archive)) as backend:
            assert isinstance(backend, InMemoryBackend)
            assert backend.transcript.keeps_history_in_checkpoints is not archive
            assert await backend.health() == {"memory": "ok"}


def settings_for(profile: str, variant: str, **common: str) -> Settings:
    if variant == "archive":  # a late profile's own fields: as the guide says, not via .of()
        return Settings(profile=profile, storage=MemorySettings(memory_archive=True), **common)
    return Settings.of(profile=profile, **common)


@pytest.mark.parametrize("variant", ["checkpoints", "archive"])
def test_the_application_serves_the_api_on_the_registered_profile(
    registered: str, variant: str
) -> None:
    app = create_app(settings_for(registered, variant))
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with TestClient(app, timeout=30) as client:
        client.headers.update(HEADERS)
        ready = client.get("/health/ready").json()
        assert ready == {"status": "ok", "checks": {"memory": "ok"}}, ready

        response = client.post(
            f"/v1/threads/{thread}/runs",
            json={"message": {"content": DENTAL}},
            headers={"Accept": "application/json"},
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["status"] == "answered"
        assert body["thread_id"] == thread
        assert body["message"]["content"]

        page = client.get(f"/v1/threads/{thread}/messages")
        assert page.status_code == 200, page.text
        messages = page.json()["messages"]
        assert [m["role"] for m in messages] == ["human", "ai"]
        assert messages[0]["content"] == DENTAL
        assert messages[1]["id"] == body["message"]["id"]
        assert messages[1]["content"] == body["message"]["content"]

        assert client.delete(f"/v1/threads/{thread}").status_code == 204
        gone = client.get(f"/v1/threads/{thread}/messages")
        assert gone.status_code == 404, gone.text
        assert client.delete(f"/v1/threads/{thread}").status_code == 204, "already gone"


def test_a_configured_service_token_is_required(registered: str) -> None:
    """The profile requires none (``requires_token = False``); once one is configured, every
    ``/v1`` call must present it (``Authorization: Bearer``)."""
    app = create_app(Settings.of(profile=registered, service_token=TOKEN))
    thread = f"t-{uuid.uuid4().hex[:8]}"
    with TestClient(app, timeout=30) as client:
        client.headers.update(HEADERS)
        refused = client.get(f"/v1/threads/{thread}/messages")
        assert refused.status_code == 401, refused.text
        client.headers["Authorization"] = f"Bearer {TOKEN}"
        response = client.post(
            f"/v1/threads/{thread}/runs",
            json={"message": {"content": DENTAL}},
            headers={"Accept": "application/json"},
        )
        assert response.status_code == 200, response.text
        assert len(client.get(f"/v1/threads/{thread}/messages").json()["messages"]) == 2
