"""threadkeeper's HTTP API (Litestar): a thin translation layer over ``ThreadService``.

The names below are imported on first use: ``threadkeeper.app.http.schemas`` (the wire types,
which ``threadkeeper export`` writes too) must not bring Litestar with it."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from threadkeeper.app.http.app import ThreadkeeperHttpPlugin, create_http_app
    from threadkeeper.app.http.settings import ANY_TENANT, HttpSettings

_WHERE = {
    "ThreadkeeperHttpPlugin": "threadkeeper.app.http.app",
    "create_http_app": "threadkeeper.app.http.app",
    "ANY_TENANT": "threadkeeper.app.http.settings",
    "HttpSettings": "threadkeeper.app.http.settings",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ANY_TENANT", "HttpSettings", "ThreadkeeperHttpPlugin", "create_http_app"]
