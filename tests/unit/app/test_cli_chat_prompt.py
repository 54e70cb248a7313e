"""``threadkeeper chat``'s prompt off a terminal (``cli.chat.PromptReader``): lines as
written, the end of the input, and a Ctrl-C that arrives the moment the prompt is out still
quits (with ``input()`` the client hung in ``read()`` until the next line)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import IO

import pytest

from threadkeeper.app.cli.chat import PromptReader


@pytest.fixture
def pipe() -> Iterator[tuple[IO[str], int]]:
    read_end, write_end = os.pipe()
    stream = os.fdopen(read_end, "r", encoding="utf-8")
    try:
        yield stream, write_end
    finally:
        stream.close()
        with contextlib.suppress(OSError):  # closed by the test
            os.close(write_end)


def test_lines_as_written_then_the_end(
    pipe: tuple[IO[str], int], capsys: pytest.CaptureFixture[str]
) -> None:
    stream, write_end = pipe
    reader = PromptReader(stream)
    os.write(write_end, "first\nsecond line\r\nدرود ".encode())
    assert reader.read("you> ") == "first"
    assert reader.read("you> ") == "second line"
    later = threading.Timer(0.1, lambda: os.write(write_end, "世界\nlast, unended".encode()))
    later.start()
    assert reader.read("you> ") == "درود 世界"  # a line split across two writes
    later.join()
    os.close(write_end)
    assert reader.read("you> ") == "last, unended"
    with pytest.raises(EOFError):
        reader.read("you> ")
    assert capsys.readouterr().out == "you> " * 5


def test_ctrl_c_the_moment_the_prompt_is_out_quits() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("THREADKEEPER_")}
    env["PYTHONUNBUFFERED"] = "1"
    for attempt in range(5):  # before: 4 of 5 hung
        chat = subprocess.Popen(
            [sys.executable, "-m", "threadkeeper.app.cli", "chat", "--url", "http://127.0.0.1:9"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert chat.stdout is not None
        seen = b""
        while b"you> " not in seen:
            chunk = os.read(chat.stdout.fileno(), 256)
            assert chunk, f"chat ended before its prompt: {chat.stderr.read()!r}"  # type: ignore[union-attr]
            seen += chunk
        chat.send_signal(signal.SIGINT)  # at once: the client is between the prompt and read()
        try:
            code = chat.wait(timeout=60)
        except subprocess.TimeoutExpired:
            chat.kill()
            chat.wait()
            pytest.fail(f"attempt {attempt}: chat did not quit on Ctrl-C at the prompt")
        finally:
            for stream in (chat.stdin, chat.stdout, chat.stderr):
                if stream is not None:
                    stream.close()
        assert code == 0
