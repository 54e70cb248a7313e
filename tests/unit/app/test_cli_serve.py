"""``threadkeeper serve`` refuses a configuration that cannot start with one clear line and
exit status 2 — before uvicorn starts, not as a traceback from the application's lifespan."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from threadkeeper.adapters.embedded import DataDirLock
from threadkeeper.app import cli
from threadkeeper.app.cli import serve as cli_serve


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(autouse=True)
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("THREADKEEPER_CONFIG", "THREADKEEPER_PROFILE", "THREADKEEPER_HOOKS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("THREADKEEPER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("THREADKEEPER_TOKENIZER", "estimate")
    return tmp_path / "data"


def refused(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line ``serve`` printed (and nothing from uvicorn)."""
    code = cli.main(["serve", "--port", str(free_port())])
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert "Uvicorn" not in err
    assert "Started server process" not in err
    assert lines[0].startswith("threadkeeper: cannot start: ")
    return lines[0]


def test_a_destructive_hook_on_a_checkpoint_transcript_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("THREADKEEPER_HOOKS", "truncate_tool_results,compact")
    line = refused(capsys)
    assert "THREADKEEPER_HOOKS='truncate_tool_results,compact'" in line  # what is wrong
    assert "use trim" in line  # what to do


def test_an_unknown_hook_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("THREADKEEPER_HOOKS", "trim,no_such_hook")
    line = refused(capsys)
    assert "unknown hook(s) no_such_hook" in line
    assert "installed:" in line


def test_a_model_that_cannot_be_built_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # langchain-openai is not installed (and were it installed, there is no API key)
    monkeypatch.setenv("THREADKEEPER_MODEL", "openai:gpt-4o-mini")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    line = refused(capsys)
    assert "openai" in line.lower()
    assert "THREADKEEPER_MODEL" in line or "api_key" in line.lower()


def test_a_data_dir_another_process_holds_is_one_line(
    environment: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    holder = DataDirLock(environment)
    holder.acquire()  # another server, say one that started between two checks
    try:
        line = refused(capsys)
    finally:
        holder.release()
    assert f"{environment} is in use by process" in line
    assert "THREADKEEPER_DATA_DIR" in line


def test_a_bad_tokenizer_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("THREADKEEPER_TOKENIZER", "no-such-tokenizer")
    assert "THREADKEEPER_TOKENIZER must be one of" in refused(capsys)


async def test_connections_to_the_server_socket_send_without_delay() -> None:
    """``serve`` binds its socket itself (a taken port is one line); asyncio sets TCP_NODELAY
    only on sockets that say they are TCP. Without it, each response on a kept-alive
    connection waited ~40 ms for the client's delayed ACK."""
    import asyncio

    listening = cli_serve._listen("127.0.0.1", 0)
    listening.listen()
    seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted = writer.get_extra_info("socket")
        seen.set_result(accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(accept, sock=listening)
    try:
        port = listening.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(seen, timeout=10) != 0
        writer.close()
    finally:
        server.close()
        await server.wait_closed()


def test_what_start_up_built_is_left_out_of_full_collections() -> None:
    """A full collection walked every object start-up made (~150 ms, every few hundred runs)."""
    import gc

    from threadkeeper.app.cli.serve import settle_heap

    built = [{"start-up": i} for i in range(50_000)]  # what a service's start-up leaves behind
    try:
        frozen = settle_heap()
        assert frozen >= len(built)
        assert len(gc.get_objects()) < len(built), "a full collection would still walk them"
    finally:
        gc.unfreeze()
    assert len(gc.get_objects()) >= len(built)
