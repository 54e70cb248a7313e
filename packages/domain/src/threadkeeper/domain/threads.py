"""Thread identity: the caller's ``thread_id`` and the storage key that always holds the tenant.

Deliberate deviation from ADR-0007: the stored key is ``tenant:user:thread`` (scope ``user``) or
``tenant:thread`` (scope ``global``), so a leaked thread_id does not open another user's or
tenant's conversation. Tenant and user ids cannot contain ``:``, so the key is unambiguous.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum


def _not_a_dot_segment(chars: str) -> str:
    """1..128 of ``chars`` (a character class body that includes ``.``), but not ``.`` or
    ``..``: a client removes those segments from a path (RFC 3986 §5.2.4), so an id that is
    one could never be named in a URL. Spelled without lookaheads: the pattern is also the
    OpenAPI document's (ECMA-262) and schemathesis generates from it."""
    other = chars.replace(".", "")
    return (
        f"^(?:[{other}][{chars}]{{0,127}}|\\.[{other}][{chars}]{{0,126}}|\\.\\.[{chars}]{{1,126}})$"
    )


TENANT_OR_USER_ID = re.compile(_not_a_dot_segment("A-Za-z0-9._-"))
THREAD_ID = re.compile(_not_a_dot_segment("A-Za-z0-9._:-"))


class ThreadScope(StrEnum):
    USER = "user"
    GLOBAL = "global"


@dataclass(frozen=True, slots=True)
class ThreadRef:
    """One conversation as the caller names it, within the caller's tenant and user."""

    tenant_id: str
    user_id: str
    thread_id: str
    scope: ThreadScope = ThreadScope.USER

    def __post_init__(self) -> None:
        for name, value, pattern in (
            ("tenant_id", self.tenant_id, TENANT_OR_USER_ID),
            ("user_id", self.user_id, TENANT_OR_USER_ID),
            ("thread_id", self.thread_id, THREAD_ID),
        ):
            if not pattern.fullmatch(value):
                raise ValueError(f"invalid {name}: must match {pattern.pattern}")

    @property
    def key(self) -> str:
        """The storage key (the LangGraph ``thread_id`` of the checkpoints)."""
        if self.scope is ThreadScope.USER:
            return f"{self.tenant_id}:{self.user_id}:{self.thread_id}"
        return f"{self.tenant_id}:{self.thread_id}"

    @classmethod
    def of_key(
        cls, key: str, tenant_id: str, user_id: str, scope: ThreadScope = ThreadScope.USER
    ) -> ThreadRef | None:
        """The caller's thread behind storage key ``key`` (``None``: not a key of this
        tenant and user — in scope ``global`` every thread of the tenant is the user's)."""
        prefix = f"{tenant_id}:{user_id}:" if scope is ThreadScope.USER else f"{tenant_id}:"
        if not key.startswith(prefix):
            return None
        try:
            return cls(tenant_id, user_id, key.removeprefix(prefix), scope)
        except ValueError:
            return None


def log_name(thread_key: str) -> str:
    """A thread as log lines name it: ``thread:`` and 12 hex digits of the SHA-256 of its key.

    A thread key is ``tenant:user:thread`` — a user id — and may not reach a log line; this
    name is stable (the same thread has the same name on every replica and in every line) and
    tells nothing of the key. Traces name a thread by ``gen_ai.conversation.id`` (an HMAC with
    the operator's key) instead.
    """
    import hashlib

    return "thread:" + hashlib.sha256(thread_key.encode("utf-8")).hexdigest()[:12]
