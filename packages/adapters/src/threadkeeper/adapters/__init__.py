"""threadkeeper.adapters — one subpackage per storage backend, each implementing the domain's
ports (and LangGraph's ``BaseCheckpointSaver``/``BaseStore``) for one profile.

``postgres`` and ``redis_mysql`` never import each other (import-linter contract).
"""
