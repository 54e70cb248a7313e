"""threadkeeper's HTTP API (Litestar): a thin translation layer over ``ThreadService``."""

from threadkeeper.app.http.app import ThreadkeeperHttpPlugin, create_http_app
from threadkeeper.app.http.settings import ANY_TENANT, HttpSettings

__all__ = ["ANY_TENANT", "HttpSettings", "ThreadkeeperHttpPlugin", "create_http_app"]
