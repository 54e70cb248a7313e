"""``threadkeeper chat`` as a person uses it, driven as a process (pipes, SIGINT) against a
real server: Ctrl-C stops the answer being streamed and nothing of that round is stored,
another Ctrl-C or Ctrl-D quits, never a traceback; a 401 names the variable to set and a 422
the offending field."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.test_server import free_port, serve, wait_ready

TENANT = "acme-insurance"
USER = "chat-user"
HEADERS = {"X-Tenant-Id": TENANT, "X-User-Id": USER}
LONG_QUESTION = "Please give me the full details of the dental cover"
SHORT_QUESTION = "How do I file a claim?"
TOKEN = "chat-e2e-token"


def start(data_dir: Path, **env: str) -> tuple[str, subprocess.Popen[str]]:
    port = free_port()
    process = serve(data_dir, port, **env)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url, process)
    return url, process


def stop(process: subprocess.Popen[str]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Tokens 0.15 s apart: an answer streams for several seconds, time to interrupt it."""
    url, process = start(tmp_path_factory.mktemp("chat"), THREADKEEPER_MODEL_TOKEN_DELAY_MS="150")
    try:
        yield url
    finally:
        stop(process)


class Chat:
    """A ``threadkeeper chat`` process; its output read line by line (and the partial line
    being streamed) by a thread, so the pipes never fill."""

    def __init__(self, *args: str, token: str | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("THREADKEEPER_")}
        env["PYTHONUNBUFFERED"] = "1"
        if token is not None:
            env["THREADKEEPER_SERVICE_TOKEN"] = token
        self.process = subprocess.Popen(
            [sys.executable, "-m", "threadkeeper.app.cli", "chat", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.out: queue.Queue[str] = queue.Queue()
        self.seen = ""
        self.err: list[str] = []
        threading.Thread(target=self._read_out, daemon=True).start()
        threading.Thread(target=self._read_err, daemon=True).start()

    def _read_out(self) -> None:
        assert self.process.stdout is not None
        while piece := self.process.stdout.read(1):
            self.out.put(piece)

    def _read_err(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.err.append(line)

    def wait_for(self, text: str, timeout: float = 60) -> str:
        """Everything printed until ``text`` has appeared (after what was waited for before)."""
        deadline = time.monotonic() + timeout
        start = len(self.seen)
        while text not in self.seen[start:]:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no {text!r} in {self.seen[start:]!r}; stderr {self.err}")
            try:
                self.seen += self.out.get(timeout=remaining)
            except queue.Empty:
                continue
        return self.seen[start:]

    def say(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def interrupt(self) -> None:
        self.process.send_signal(signal.SIGINT)

    def end(self, timeout: float = 30) -> tuple[int, str]:
        """Wait for the process to exit; its status and standard error."""
        code = self.process.wait(timeout=timeout)
        time.sleep(0.2)  # the reader threads drain what is left
        return code, "".join(self.err)


def transcript(url: str, thread: str) -> list[tuple[str, str]]:
    response = httpx.get(f"{url}/v1/threads/{thread}/messages", headers=HEADERS, timeout=30)
    if response.status_code == 404:
        return []
    assert response.status_code == 200, response.text
    return [(m["role"], m["content"]) for m in response.json()["messages"]]


def test_ctrl_c_stops_the_answer_and_nothing_of_it_is_stored(server: str) -> None:
    thread = f"chat-{uuid.uuid4().hex[:8]}"
    chat = Chat("--url", server, "--thread", thread, "--tenant", TENANT, "--user", USER)
    chat.wait_for("you> ")
    chat.say(LONG_QUESTION)
    chat.wait_for("bot> ")
    chat.wait_for(" ")  # a piece of the answer has arrived: it is being streamed
    chat.interrupt()
    chat.wait_for("[stopped: this round is not stored]")
    chat.wait_for("you> ")
    assert chat.process.poll() is None, "the first Ctrl-C stops the answer, not the client"
    # the server cancelled the run: the thread is free at once and holds nothing of it
    # (were the run still going, this message would be refused 409, or both rounds stored)
    chat.say(SHORT_QUESTION)
    answered = chat.wait_for("you> ")
    assert "[409]" not in answered
    assert "\n     [" in answered, answered  # the status line ending an answer
    humans = [content for role, content in transcript(server, thread) if role == "human"]
    assert humans == [SHORT_QUESTION]
    chat.process.stdin.close()  # type: ignore[union-attr]  # Ctrl-D
    code, err = chat.end()
    assert code == 0
    assert "Traceback" not in err + chat.seen


def test_ctrl_c_at_the_prompt_quits(server: str) -> None:
    chat = Chat("--url", server, "--tenant", TENANT, "--user", USER)
    chat.wait_for("you> ")
    chat.interrupt()
    code, err = chat.end()
    assert code == 0
    assert "Traceback" not in err + chat.seen
    assert "KeyboardInterrupt" not in err


def test_a_second_ctrl_c_quits(server: str) -> None:
    thread = f"chat-{uuid.uuid4().hex[:8]}"
    chat = Chat("--url", server, "--thread", thread, "--tenant", TENANT, "--user", USER)
    chat.wait_for("you> ")
    chat.say(LONG_QUESTION)
    chat.wait_for("bot> ")
    chat.interrupt()
    chat.wait_for("you> ")
    chat.interrupt()
    code, err = chat.end()
    assert code == 0
    assert "Traceback" not in err + chat.seen
    assert transcript(server, thread) == []


def test_a_422_shows_the_offending_field(server: str) -> None:
    # (a thread id no URL can carry is refused before the chat starts: test_cli_operator)
    chat = Chat("--url", server, "--tenant", "no spaces allowed")
    chat.wait_for("you> ")
    chat.say("Hello")
    code, err = chat.end()
    assert code == 2
    assert "Traceback" not in err
    [line] = [line for line in err.splitlines() if line.startswith("threadkeeper: ")][-1:]
    assert line.startswith("threadkeeper: [422] X-Tenant-Id (header, set by --tenant): "), line


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """An embedded server that asks for a service token."""
    url, process = start(tmp_path_factory.mktemp("chat-token"), THREADKEEPER_SERVICE_TOKEN=TOKEN)
    try:
        yield url
    finally:
        stop(process)


@pytest.mark.parametrize("token", [None, "not-the-token"], ids=["unset", "wrong"])
def test_a_401_says_which_variable_to_set(token_server: str, token: str | None) -> None:
    chat = Chat("--url", token_server, "--tenant", TENANT, "--user", USER, token=token)
    chat.wait_for("you> ")
    chat.say("Hello")
    code, err = chat.end()
    assert code == 2
    assert "Traceback" not in err
    assert "THREADKEEPER_SERVICE_TOKEN" in err
    if token is None:
        assert "set THREADKEEPER_SERVICE_TOKEN to its service token" in err


def test_the_token_it_reads_is_sent(token_server: str) -> None:
    thread = f"chat-{uuid.uuid4().hex[:8]}"
    chat = Chat(
        "--url", token_server, "--thread", thread, "--tenant", TENANT, "--user", USER, token=TOKEN
    )
    chat.wait_for("you> ")
    chat.say(SHORT_QUESTION)
    chat.wait_for("\n     [")
    chat.process.stdin.close()  # type: ignore[union-attr]
    code, err = chat.end()
    assert code == 0, err
