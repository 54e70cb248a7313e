"""Thread identity: the caller's ``thread_id`` and the storage key that always holds the tenant.

Deliberate deviation from ADR-0007: the stored key is ``tenant:user:thread`` (scope ``user``) or
``tenant:thread`` (scope ``global``), so a leaked thread_id does not open another user's or
tenant's conversation. Tenant and user ids cannot contain ``:``, so the key is unambiguous.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

TENANT_OR_USER_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
THREAD_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


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
