"""Configuration: ``THREADKEEPER_*`` environment variables, optionally a YAML file named by
``THREADKEEPER_CONFIG`` with the same keys; the environment wins. Names and defaults are
DESIGN.md's — other tools rely on them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec
import yaml

from threadkeeper.adapters.profiles import (
    DEFAULT as DEFAULT_PROFILE,
)
from threadkeeper.adapters.profiles import (
    UnknownProfile,
    profile_settings,
)
from threadkeeper.adapters.profiles import (
    names as profile_names,
)

PREFIX = "THREADKEEPER_"


class ConfigError(ValueError):
    """The configuration cannot be used; the message names the setting."""


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Everything ``THREADKEEPER_*`` says. What only one storage profile uses is declared by
    that profile (``adapters/<profile>/settings.py``) and lives in ``storage``; build a
    ``Settings`` from flat values with ``Settings.of(profile=…, postgres_url=…, …)``."""

    profile: str = DEFAULT_PROFILE
    storage: Any = None
    """The profile's own settings struct (``None``: its defaults)."""
    unused: tuple[Any, ...] = ()
    """The other profiles' settings as given (or their defaults): not used, but shown by
    ``doctor`` and their credentials masked like the rest."""
    service_token: str | None = None
    service_tokens: dict[str, list[str]] | None = None
    thread_scope: Literal["user", "global"] = "user"
    hooks: str | None = None
    """``None``: the profile's default pipeline."""
    token_budget: int = 8000
    tokenizer: str = "o200k_base"
    summary_after_turns: int = 20
    tool_result_max_chars: int = 2000
    memory_max_facts: int = 50
    retention_days: int | None = None
    retention_sweep_minutes: int = 0
    retention_memory: bool = False
    """Retention also deletes the memory of users idle past ``retention_days`` (no memory
    written or read, no run of theirs since)."""
    rate_limit_per_minute: int = 0
    model: str = "builtin"
    model_token_delay_ms: float = 0.0
    model_timeout_seconds: float = 30.0
    """One model call, its whole stream included (and the provider client's own timeout)."""
    model_max_retries: int = 1
    """Retries of a failed model call (``ModelRetryMiddleware``), before the fallback."""
    model_fallback: str | None = None
    """A second model (``builtin`` or an ``init_chat_model`` string) when the first fails."""
    followup_workers: int = 32
    """Follow-up work (memory after an answer, folds ahead) this process does at once; 0: none
    here (the work waits for a replica that runs workers). The work waits on the model, so the
    bound is set by arrivals times the model's latency, not by the CPU: at 4 it made at most
    4 / D extractions a second, fewer than 4 chatting threads ask for, and folds made ahead
    came too late (docs/benchmarks.md, the follow-up latency benchmark)."""
    followup_timeout_seconds: float = 45.0
    """One attempt's preparation — the memory extraction's model call and reads — apart from
    the chat call's timeout."""
    followup_max_attempts: int = 8
    """Attempts before follow-up work is given up (backoff 1, 2, 4 … 60 s between them); the
    last one extracts memory by the rules if the model still fails."""
    followup_lease_seconds: float = 90.0
    """How long a replica holds an item; a killed replica's work is taken over after this."""
    run_timeout_seconds: float = 120.0
    """The whole run; past it the run ends (``error`` / 504 ``run-timeout``), nothing stored."""
    sse_heartbeat_seconds: float = 15.0
    """A keep-alive comment on an SSE stream that has had nothing to send this long."""
    shutdown_grace_seconds: float = 20.0
    """After SIGTERM/SIGINT, how long runs in flight may finish before they are cancelled."""
    http_keepalive_seconds: float = 75.0
    """How long ``serve`` keeps an idle HTTP/1.1 connection open. Longer than the idle timeout
    of the load balancer or client pool in front (60 s on the common ones; httpx 5 s): the side
    that closes an idle connection first must be the client, or a request sent just as the
    server closes is lost with no response (uvicorn's own default is 5 s)."""
    http_body_timeout_seconds: float = 10.0
    """A request's whole body within this long of its arrival, or 408 ``request-timeout`` and
    the connection closed (a client that sends less than its ``Content-Length`` held a
    connection with no answer and no bound)."""
    http_max_connections: int = 1000
    """Connections ``serve`` keeps open at once (uvicorn's ``limit_concurrency``, which also
    counts requests in flight): a request that finds this many open, its own included, is
    answered 503 at once instead of queueing."""
    trace_id_key: str | None = None
    """The key of the HMAC that names a thread in traces (``gen_ai.conversation.id``): the
    same on every replica, secret like a token. Unset: traces carry no conversation id."""
    log_format: Literal["text", "json"] = "text"
    """``serve``'s log lines: text (``LOG_FORMAT``), or one JSON object per line with the
    record's ``trace_id`` and ``span_id`` (``app.logs``)."""

    def __post_init__(self) -> None:
        try:
            kind = profile_settings(self.profile)
        except UnknownProfile:
            raise ConfigError(
                f"{PREFIX}PROFILE must be one of {', '.join(profile_names())}, not {self.profile!r}"
            ) from None
        if self.storage is None:
            msgspec.structs.force_setattr(self, "storage", kind())
        elif not isinstance(self.storage, kind):
            raise ConfigError(f"the storage settings of profile {self.profile!r} are a {kind}")
        positive = {
            "token_budget": self.token_budget,
            "tool_result_max_chars": self.tool_result_max_chars,
            "memory_max_facts": self.memory_max_facts,
            "http_max_connections": self.http_max_connections,
        }
        for name, value in positive.items():
            if value < 1:
                raise ConfigError(f"{PREFIX}{name.upper()} must be positive")
        for name, seconds in {
            "model_timeout_seconds": self.model_timeout_seconds,
            "run_timeout_seconds": self.run_timeout_seconds,
            "sse_heartbeat_seconds": self.sse_heartbeat_seconds,
            "http_keepalive_seconds": self.http_keepalive_seconds,
            "http_body_timeout_seconds": self.http_body_timeout_seconds,
            "followup_timeout_seconds": self.followup_timeout_seconds,
        }.items():
            if not seconds > 0:
                raise ConfigError(f"{PREFIX}{name.upper()} must be positive")
        non_negative: dict[str, float] = {
            "summary_after_turns": self.summary_after_turns,
            "retention_sweep_minutes": self.retention_sweep_minutes,
            "rate_limit_per_minute": self.rate_limit_per_minute,
            "model_token_delay_ms": self.model_token_delay_ms,
            "model_max_retries": self.model_max_retries,
            "shutdown_grace_seconds": self.shutdown_grace_seconds,
            "followup_workers": self.followup_workers,
        }
        for name, amount in non_negative.items():
            if amount < 0:
                raise ConfigError(f"{PREFIX}{name.upper()} must not be negative")
        if self.followup_max_attempts < 1:
            raise ConfigError(f"{PREFIX}FOLLOWUP_MAX_ATTEMPTS must be positive")
        if not self.followup_lease_seconds > self.followup_timeout_seconds + 10:
            raise ConfigError(
                f"{PREFIX}FOLLOWUP_LEASE_SECONDS must exceed {PREFIX}FOLLOWUP_TIMEOUT_SECONDS "
                "by more than 10 s (an attempt, then its write, within its lease)"
            )
        if self.retention_days is not None and self.retention_days < 1:
            raise ConfigError(f"{PREFIX}RETENTION_DAYS must be positive when set")
        if self.retention_memory and self.retention_days is None:
            raise ConfigError(f"{PREFIX}RETENTION_MEMORY needs {PREFIX}RETENTION_DAYS (the window)")
        if self.retention_sweep_minutes and self.retention_days is None:
            raise ConfigError(
                f"{PREFIX}RETENTION_SWEEP_MINUTES needs {PREFIX}RETENTION_DAYS (the window)"
            )
        if self.requires_token and not (self.service_token or self.service_tokens):
            raise ConfigError(
                f"{PREFIX}SERVICE_TOKEN is required on the {self.profile} profile (only one "
                "that serves a single process on one machine may run without one)"
            )

    @classmethod
    def of(cls, **values: Any) -> Settings:
        """Settings from flat values, as the variables spell them (lower case, without the
        prefix): the profile's own go into its ``storage`` struct.

        Raises:
            ConfigError: a value is invalid (naming the variable).
        """
        profile = str(values.get("profile", DEFAULT_PROFILE))
        try:
            profile_settings(profile)
        except UnknownProfile:
            raise ConfigError(
                f"{PREFIX}PROFILE must be one of {', '.join(profile_names())}, not {profile!r}"
            ) from None
        given = {k: values.pop(k) for k in list(values) if k in ALL_STORAGE_FIELDS}
        try:
            structs = {
                name: msgspec.convert(
                    {k: v for k, v in given.items() if k in fields(name)},
                    profile_settings(name),
                    strict=False,
                )
                for name in profile_names()
            }
            unused = tuple(v for name, v in structs.items() if name != profile)
            common = msgspec.convert({**values, "storage": None}, cls, strict=False)
            return msgspec.structs.replace(common, storage=structs[profile], unused=unused)
        except msgspec.ValidationError as exc:
            raise ConfigError(_explain(str(exc))) from exc
        except ValueError as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(str(exc)) from exc

    @property
    def requires_token(self) -> bool:
        """Callers must present a service token (the profile says)."""
        return bool(type(self.storage).requires_token)

    @property
    def history_in_checkpoints(self) -> bool:
        """The checkpoints are the record (destructive hooks are refused)."""
        return bool(type(self.storage).history_in_checkpoints)

    def hook_names(self) -> str:
        """The history hooks: as set, else the default for where the profile keeps its
        history (destructive ones only where the checkpoints are not the record)."""
        from threadkeeper.hooks.pipeline import DEFAULT_HOOKS, DESTRUCTIVE_DEFAULT_HOOKS

        if self.hooks is not None:
            return self.hooks
        return DEFAULT_HOOKS if self.history_in_checkpoints else DESTRUCTIVE_DEFAULT_HOOKS

    def flat(self) -> dict[str, Any]:
        """Every setting by its name, lower case: the common ones, then each profile's (the
        other profiles' too, as given)."""
        common = {
            k: v for k, v in msgspec.to_builtins(self).items() if k not in ("storage", "unused")
        }
        for struct in (self.storage, *self.unused):
            common.update(msgspec.to_builtins(struct))
        return common


COMMON = [name for name in Settings.__struct_fields__ if name not in ("storage", "unused")]


def fields(profile: str) -> tuple[str, ...]:
    """The settings profile ``profile`` declares."""
    return tuple(profile_settings(profile).__struct_fields__)


ALL_STORAGE_FIELDS = sorted(
    {field for name in profile_names() for field in profile_settings(name).__struct_fields__}
)
_FIELDS = {name: f"{PREFIX}{name.upper()}" for name in [*COMMON, *ALL_STORAGE_FIELDS]}
_STRUCTURED = {"service_tokens"}


def _raw(source: Mapping[str, Any]) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for name, variable in _FIELDS.items():
        if variable in source and source[variable] not in (None, ""):
            raw[name] = source[variable]
    return raw


def _parse_structured(name: str, value: Any) -> Any:
    if isinstance(value, str):
        try:
            return yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ConfigError(f"{PREFIX}{name.upper()} is not YAML/JSON: {exc}") from exc
    return value


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from the YAML file (if ``THREADKEEPER_CONFIG``) overlaid by the environment."""
    env = os.environ if environ is None else environ
    merged: dict[str, Any] = {}
    config_path = env.get(f"{PREFIX}CONFIG")
    if config_path:
        path = Path(config_path)
        if not path.is_file():
            raise ConfigError(f"{PREFIX}CONFIG names {path}, which is not a file")
        loaded = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path} must hold a mapping of {PREFIX}* keys")
        unknown = sorted(k for k in loaded if k not in _FIELDS.values())
        if unknown:
            raise ConfigError(f"{path}: unknown setting(s) {', '.join(map(str, unknown))}")
        merged.update(_raw(loaded))
    merged.update(_raw(env))
    for name in _STRUCTURED & merged.keys():
        merged[name] = _parse_structured(name, merged[name])
    return Settings.of(**merged)


def _choices(field: str) -> tuple[str, ...] | None:
    """The values a ``Literal`` setting allows (``None``: not such a setting)."""
    import msgspec.inspect

    for info in msgspec.inspect.type_info(Settings).fields:  # type: ignore[attr-defined]
        if info.name == field and isinstance(info.type, msgspec.inspect.LiteralType):
            return tuple(str(value) for value in info.type.values)
    return None


def _explain(message: str) -> str:
    # msgspec says "Expected `int`, got `str` - at `$.token_budget`"; name the variable instead,
    # and for a setting with a fixed set of values, the values.
    if "at `$." in message:
        head, _, where = message.partition(" - at `$.")
        field = where.split("`")[0].split(".")[0].split("[")[0]
        variable = _FIELDS.get(field, field)
        choices = _choices(field)
        if choices is not None:
            given = head.removeprefix("Invalid enum value ").strip()
            return f"{variable} must be one of {', '.join(choices)}, not {given}"
        return f"{variable}: {head}"
    return message


# -- secrets ---------------------------------------------------------------------------------

MASK = "***"


def _urls(settings: Settings) -> dict[str, str]:
    """The URL settings (fields named ``*_url``) of every profile."""
    return {
        name: value
        for name, value in settings.flat().items()
        if name.endswith("_url") and isinstance(value, str)
    }


_USERINFO = re.compile(
    r"(?<![A-Za-z0-9+.\-])(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^:@/\s]*):(?P<secret>[^\s/]*)@"
)
"""``scheme://user:password@`` (the password may hold ``@``; the last one before the host ends
it); ``scheme://:password@`` too (Redis). A scheme starts where a word does: tried from every
letter of a long word, the search was quadratic in it (0.57 s on 32 KiB of letters, run on
every log line)."""
_SECRET_PARAMETER = re.compile(
    r"(?P<head>\b(?:password|passwd|pwd|pass|sslpassword|secret|token|access_token|api_key|"
    r"apikey|auth)\s*=\s*)(?P<secret>'(?:[^'\\]|\\.)*'|[^&#\s]*)",
    re.IGNORECASE,
)
"""A credential as a URL query parameter (``?password=…``) or a libpq ``key=value`` DSN
keyword (``password=…``)."""
_MIN_FREE_TEXT_SECRET = 4
"""Shorter secrets are masked where they stand in a URL, not wherever the characters occur."""


def mask_url(url: str) -> str:
    """``url`` with every credential in it replaced by ``***``: the password of its user
    information and any ``password``/``token``-like query parameter or DSN keyword."""
    masked = _USERINFO.sub(
        lambda m: f"{m['head']}:{MASK}@" if m["secret"] else m[0],
        url,
    )
    return _SECRET_PARAMETER.sub(
        lambda m: f"{m['head']}{MASK}" if m["secret"] not in ("", "''") else m[0], masked
    )


def _url_secrets(url: str) -> set[str]:
    from urllib.parse import unquote

    found: set[str] = set()
    for pattern in (_USERINFO, _SECRET_PARAMETER):
        for match in pattern.finditer(url):
            value = match["secret"].strip("'")
            if value:
                found.update({value, unquote(value)})
    return found


def secrets_of(settings: Settings) -> set[str]:
    """Every credential the settings hold: URL passwords (as written and decoded), tokens."""
    found: set[str] = set()
    for url in _urls(settings).values():
        found.update(_url_secrets(url))
    if settings.service_token:
        found.add(settings.service_token)
    if settings.trace_id_key:
        found.add(settings.trace_id_key)
    found.update((settings.service_tokens or {}).keys())
    return {s for s in found if s}


def redact(text: str, secrets: set[str] | frozenset[str] = frozenset()) -> str:
    """``text`` (an error, a log line) with credentials masked: those in any URL or DSN it
    holds, and every one of ``secrets`` (``secrets_of``) wherever it occurs."""
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= _MIN_FREE_TEXT_SECRET:
            text = text.replace(secret, MASK)
    return mask_url(text)


def describe(settings: Settings) -> str:
    """The effective settings, credentials masked (for ``threadkeeper doctor``)."""
    shown = settings.flat()
    for secret in ("service_token", "service_tokens", "trace_id_key"):
        if shown.get(secret):
            shown[secret] = MASK
    for name in _urls(settings):
        shown[name] = mask_url(shown[name])
    return json.dumps({_FIELDS[k]: v for k, v in shown.items()}, indent=2, ensure_ascii=False)
