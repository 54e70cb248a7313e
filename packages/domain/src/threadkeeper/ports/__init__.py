"""The ports: what the application is wired with, stated as protocols and nothing else.

The app (``threadkeeper.app``) is typed by these and never by an adapter: the composition root
(``app.container``, ``app.storage``, ``app.config``, ``app.cli``) opens an adapter and hands it
in. A port may name a framework's type where the framework is the contract — LangGraph's
``BaseStore`` and ``BaseCheckpointSaver``, LangChain's messages — but no driver, and no module
of ``threadkeeper.adapters`` (the import contracts in ``pyproject.toml`` hold it, type-checking
imports counted).

- ``storage``: an opened storage profile, split by job — ``Rounds`` (what a run holds and
  stores), ``Reads`` (what the API and the follow-up work read), ``Upkeep`` (retention,
  follow-up work, health) — and ``Backend``, all three.
- ``knowledge``: the FAQ retrieval a run's context is given.
"""
