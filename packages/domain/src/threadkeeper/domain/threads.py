"""Thread identity: the caller's ``thread_id`` and the storage key that always holds the tenant.

Deliberate deviation from ADR-0007: the stored key is ``tenant:user:thread`` (scope ``user``) or
``tenant:thread`` (scope ``global``), so a leaked thread_id does not open another user's or
tenant's conversation. Tenant and stored user ids cannot contain ``:``, so the key is
unambiguous.

A user id is whatever a backend calls its user — ``erin@example.com``, ``auth0|5f3c…`` — any
printable text of 1 to 128 characters (``USER_ID_RULE``). It is stored as itself when it is of
the plain alphabet (``TENANT_OR_USER_ID``: every id accepted before, so no stored key changes),
and otherwise as ``~`` and the SHA-256 of its UTF-8 bytes in hex (``stored_user_id``): ``~`` is
outside the plain alphabet, so the two forms never meet, and a hash never contains ``:``. The
encoding is applied once, where an id enters (the HTTP headers and path, the CLI): an id sent
as ``~<hex>`` is itself hashed, so no caller can name another user's stored form.
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
HASHED_USER_ID = re.compile(r"^~[0-9a-f]{64}$")
"""A stored user id that is not of the plain alphabet: ``~`` + SHA-256 hex."""
MAX_ID_CHARS = 128
USER_ID_RULE = (
    "a user id is 1 to 128 printable characters (letters of any script, digits, spaces inside, "
    "punctuation such as @ | + / : — no control characters, no leading or trailing space)"
)
_CONTROL = r"\x00-\x1f\x7f-\x9f"
USER_ID_PATTERN = f"^[^{_CONTROL} ](?:[^{_CONTROL}]{{0,{MAX_ID_CHARS - 2}}}[^{_CONTROL} ])?$"
"""``USER_ID_RULE`` as a pattern (the OpenAPI document's: ECMA-262 and Python alike):
printable here means no C0 or C1 control character and no DEL."""
_CONTROLS = re.compile(f"[{_CONTROL}]")
_FIRST, _INNER, _LAST = f"[^{_CONTROL} ./?#]", f"[^{_CONTROL}/?#]", f"[^{_CONTROL} /?#]"
USER_ID_PATH_PATTERN = (
    f"^(?:{_FIRST}|{_FIRST}{_INNER}{{0,125}}{_LAST}|\\.{_FIRST}|\\.{_FIRST}{_INNER}{{0,124}}{_LAST}"
    f"|\\.\\.{_INNER}{{0,124}}{_LAST})$"
)
"""The user ids a ``/v1/users/{user_id}`` path carries as themselves: ``USER_ID_PATTERN``
without ``/`` (routing decodes ``%2F`` first), ``?`` or ``#`` (a client that forgets to
percent-encode them ends the path there), and not ``.`` or ``..`` (a client removes a dot
segment). Any id can be named in a path by its stored form (``~`` + SHA-256 hex)."""


def user_id_problem(user_id: str) -> str | None:
    """Why ``user_id`` (as a caller sent it) is refused, in words; ``None``: accepted."""
    if not user_id:
        return "the user id is empty: " + USER_ID_RULE
    if len(user_id) > MAX_ID_CHARS:
        return f"the user id has {len(user_id)} characters: " + USER_ID_RULE
    if (control := _CONTROLS.search(user_id)) is not None:
        return f"the user id has a control character at {control.start()}: " + USER_ID_RULE
    if user_id.startswith(" ") or user_id.endswith(" "):
        return "the user id starts or ends with a space: " + USER_ID_RULE
    return None


def stored_user_id(user_id: str) -> str:
    """The form ``user_id`` (as a caller sent it) is stored under: itself when it is of the
    plain alphabet, else ``~`` + the SHA-256 hex of its UTF-8 bytes. Injective, and never
    equal for a plain id and another's hash; apply it once, where the id enters.

    Raises:
        ValueError: the id is refused (``user_id_problem``: the reason, in words).
    """
    problem = user_id_problem(user_id)
    if problem is not None:
        raise ValueError(problem)
    if TENANT_OR_USER_ID.fullmatch(user_id):
        return user_id
    import hashlib

    return "~" + hashlib.sha256(user_id.encode("utf-8", "surrogatepass")).hexdigest()


def is_stored_user_id(value: str) -> bool:
    """Whether ``value`` is a stored user id (plain, or ``~`` + SHA-256 hex)."""
    return bool(TENANT_OR_USER_ID.fullmatch(value) or HASHED_USER_ID.fullmatch(value))


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
            ("thread_id", self.thread_id, THREAD_ID),
        ):
            if not pattern.fullmatch(value):
                raise ValueError(f"invalid {name}: must match {pattern.pattern}")
        if not is_stored_user_id(self.user_id):
            raise ValueError(
                "invalid user_id: not a stored user id (apply stored_user_id where it enters)"
            )

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
