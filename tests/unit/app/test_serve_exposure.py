"""``threadkeeper serve`` without a service token on an address beyond loopback (the embedded
profile, ``--host 0.0.0.0``) starts — a token-less local server is the embedded profile's
documented default — but says loudly that anyone who reaches it can read and write every
tenant's threads. The server is built up to uvicorn's ``serve``, which returns at once: the
socket is bound, never listened on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import uvicorn

from threadkeeper.app import cli
from threadkeeper.app.cli import serve as cli_serve


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in (
        "THREADKEEPER_CONFIG",
        "THREADKEEPER_PROFILE",
        "THREADKEEPER_HOOKS",
        "THREADKEEPER_SERVICE_TOKEN",
        "THREADKEEPER_SERVICE_TOKENS",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("THREADKEEPER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("THREADKEEPER_TOKENIZER", "estimate")
    served: list[Any] = []

    async def no_serving(self: uvicorn.Server, sockets: Any = None) -> None:
        served.append(sockets)  # bound by serve, never listened on

    monkeypatch.setattr(uvicorn.Server, "serve", no_serving)
    monkeypatch.setattr(cli_serve, "settle_heap", lambda: 0)


def serve(capsys: pytest.CaptureFixture[str], host: str) -> str:
    capsys.readouterr()
    cli.main(["serve", "--host", host, "--port", "0"])
    err = capsys.readouterr().err
    assert "serving the embedded profile" in err, err
    return err


def warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if "WARNING" in line and "service token" in line]


def test_all_interfaces_without_a_token_is_warned(capsys: pytest.CaptureFixture[str]) -> None:
    [line] = warnings(serve(capsys, "0.0.0.0"))
    assert "0.0.0.0" in line
    assert "THREADKEEPER_SERVICE_TOKEN" in line
    assert "127.0.0.1" in line  # the other way out


def test_loopback_without_a_token_is_not_warned(capsys: pytest.CaptureFixture[str]) -> None:
    assert warnings(serve(capsys, "127.0.0.1")) == []


def test_all_interfaces_with_a_token_is_not_warned(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("THREADKEEPER_SERVICE_TOKEN", "a-long-enough-service-token")
    assert warnings(serve(capsys, "0.0.0.0")) == []


@pytest.mark.parametrize(
    ("host", "warned"),
    [
        ("0.0.0.0", True),
        ("::", True),
        ("192.0.2.10", True),
        ("2001:db8::1", True),
        ("127.0.0.1", False),
        ("127.8.9.10", False),
        ("::1", False),
        ("::ffff:127.0.0.1", False),
    ],
)
def test_which_addresses_are_beyond_loopback(host: str, warned: bool) -> None:
    from threadkeeper.app.config import Settings

    settings = Settings.of(profile="embedded")
    assert (
        cli_serve.unguarded_warning(settings, host, f"http://{host}:8000") is not None
    ) is warned
