"""``threadkeeper chat`` (a terminal client of a running service) and ``threadkeeper tokens``."""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import sys
import time
import uuid
from typing import Any

from threadkeeper.app.cli.common import TOKEN_VARIABLE, _fail, _one_line, _settings
from threadkeeper.app.config import (
    ConfigError,
)


def _headers(args: argparse.Namespace) -> dict[str, str]:
    headers = {"X-Tenant-Id": args.tenant, "X-User-Id": args.user}
    token = os.environ.get(TOKEN_VARIABLE)
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers


_OPTION_OF = {"X-Tenant-Id": "--tenant", "X-User-Id": "--user", "thread_id": "--thread"}


def _refusal(status: int, problem: dict[str, Any], args: argparse.Namespace) -> tuple[str, bool]:
    """What to tell the user about a refused message, and whether every message would be
    refused the same way (then ``chat`` ends)."""
    detail = problem.get("detail") or problem.get("title") or ""
    if status == 401:
        if os.environ.get(TOKEN_VARIABLE):
            return f"the service refused the token in {TOKEN_VARIABLE} ({detail})", True
        return f"the service wants a token: set {TOKEN_VARIABLE} to its service token", True
    if status == 403:
        return f"[403] {detail} (tenant {args.tenant}, user {args.user})", True
    if status == 422:
        fields = []
        fatal = True
        for error in problem.get("errors") or [{"message": detail}]:
            key = error.get("key")
            source = error.get("source")
            option = _OPTION_OF.get(str(key))
            where = f"{key} ({source}{', set by ' + option if option else ''})" if key else ""
            fields.append(f"{where}: {error.get('message')}" if where else error.get("message"))
            fatal = fatal and source in ("header", "path")
        return f"[422] {'; '.join(str(f) for f in fields)}", fatal
    return f"[{status}] {detail}", False


STOPPED_RUN_WAIT_SECONDS = 5.0
"""How long a message waits for the run the user just stopped to let go of the thread (the
service sees the closed stream at its next event, then cancels the run: well within 1 s)."""


class ChatSession:
    """The terminal client's state: the thread, and the run being streamed or just stopped."""

    def __init__(self, client: Any, thread: str, args: argparse.Namespace) -> None:
        self.client = client
        self.thread = thread
        self.args = args
        self.streaming: str | None = None
        """The run whose answer is being streamed (from its ``metadata`` event)."""
        self.stopped: str | None = None
        """The run the user stopped with Ctrl-C last."""

    def stop(self) -> None:
        self.stopped, self.streaming = self.streaming, None

    def send(self, line: str) -> int | None:
        """One message and its streamed answer; an exit status when ``chat`` should end."""
        deadline = time.monotonic() + STOPPED_RUN_WAIT_SECONDS
        while time.monotonic() < deadline:
            outcome = self._round(line, may_wait=True)
            if outcome != "wait":
                return outcome if isinstance(outcome, int) else None
            time.sleep(0.1)
        outcome = self._round(line, may_wait=False)
        return outcome if isinstance(outcome, int) else None

    def _round(self, line: str, *, may_wait: bool) -> int | str | None:
        from urllib.parse import quote

        from httpx_sse import connect_sse

        body = {"message": {"content": line}}
        path = f"/v1/threads/{quote(self.thread, safe='')}/runs"
        with connect_sse(self.client, "POST", path, json=body) as source:
            response = source.response
            if response.status_code != 200:
                response.read()
                try:
                    problem = response.json()
                except ValueError:
                    problem = {"detail": response.text[:200]}
                if may_wait and response.status_code == 409 and self.stopped is not None:
                    running = problem.get("running_run_id")
                    if running in (None, self.stopped):  # the stopped run is still ending
                        return "wait"
                message, fatal = _refusal(response.status_code, problem, self.args)
                if fatal:
                    print(f"threadkeeper: {message}", file=sys.stderr)
                    return 2
                print(message)
                return None
            print("bot> ", end="", flush=True)
            for event in source.iter_sse():
                data = json.loads(event.data)
                if event.event == "metadata":
                    self.streaming = data.get("run_id")
                elif event.event == "messages":
                    print(data["delta"], end="", flush=True)
                elif event.event == "end":
                    cites = ", ".join(c["title"] for c in data["message"]["citations"])
                    print(f"\n     [{data['status']}{'; ' + cites if cites else ''}]")
                elif event.event == "error":
                    print(f"\n[error] {data.get('detail')}")
            self.streaming = None
        return None


class PromptReader:
    """``chat``'s prompt. On a terminal, ``input()`` (with line editing). Otherwise — a pipe, a
    script, a test — the prompt is written and the line read through ``select``, so that a
    Ctrl-C (SIGINT) arriving just after the prompt still ends the read: ``input()`` writes the
    prompt and blocks in ``read()`` with no Python in between, and the signal's handler, which
    runs only when Python next runs, would wait for the next line. The window is microseconds
    unless the client is descheduled right after the prompt, as on a loaded machine: the e2e
    test of Ctrl-C at the prompt timed out that way once, and a harness signalling as soon as
    the prompt was out hung 4 of 5 times in one run (none in later runs)."""

    POLL_SECONDS = 0.2
    """A signal that lands between the check and the ``select`` is seen this late."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = stream if stream is not None else sys.stdin
        self.pending = b""

    def read(self, prompt: str) -> str:
        """One line without its end; ``EOFError`` at the end of the input."""
        if self.stream.isatty():
            return input(prompt)
        print(prompt, end="", flush=True)
        fd = self.stream.fileno()
        while b"\n" not in self.pending:
            ready, _, _ = select.select([fd], [], [], self.POLL_SECONDS)  # SIGINT raises here
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                if not self.pending:
                    raise EOFError
                self.pending += b"\n"
            self.pending += chunk
        line, _, self.pending = self.pending.partition(b"\n")
        return line.decode(self.stream.encoding or "utf-8", "replace").rstrip("\r")


def cmd_chat(args: argparse.Namespace) -> int:
    import httpx

    # Ctrl-C must reach the client even where its parent ignored SIGINT (a background job)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    thread = args.thread or f"chat-{uuid.uuid4().hex[:8]}"
    print(
        f"thread {thread} on {args.url} (tenant {args.tenant}, user {args.user}) — type a "
        "message; Ctrl-C stops an answer, Ctrl-D or Ctrl-C at the prompt quits",
        file=sys.stderr,
    )
    try:
        with httpx.Client(base_url=args.url, headers=_headers(args), timeout=None) as client:
            session = ChatSession(client, thread, args)
            prompt = PromptReader()
            while True:
                try:
                    line = prompt.read("you> ").strip()
                except (EOFError, KeyboardInterrupt):
                    print(file=sys.stderr)
                    return 0
                if not line:
                    continue
                try:
                    ended = session.send(line)
                except KeyboardInterrupt:
                    # leaving the stream closed the connection: the service cancels the run,
                    # and nothing of this round is stored
                    session.stop()
                    print("\n     [stopped: this round is not stored]", flush=True)
                    continue
                except httpx.HTTPError as exc:
                    print(f"threadkeeper: cannot reach {args.url}: {exc}", file=sys.stderr)
                    return 1
                if ended is not None:
                    return ended
    except KeyboardInterrupt:  # a second Ctrl-C while the first one was being handled
        print(file=sys.stderr)
        return 0


# -- tokens ------------------------------------------------------------------------------


def cmd_tokens(args: argparse.Namespace) -> int:
    from threadkeeper.app.counters import counter_from_name

    name = args.counter or _settings().tokenizer
    try:
        counter = counter_from_name(name)
    except ConfigError as exc:
        _fail(f"configuration error: {exc}")
    except Exception as exc:  # a tokenizer.json that does not load
        option = "--counter" if args.counter else "THREADKEEPER_TOKENIZER"
        _fail(f"{option}: cannot load {name}: {_one_line(exc)}")
    for line in sys.stdin:
        print(counter.count_text(line.rstrip("\n")))
    return 0
