"""threadkeeper's published conformance suites: written once, run unchanged against every
implementation — the in-memory ones first, each real adapter and profile after.

Each suite is a base class of pytest tests that needs one or two fixtures from its subclass
(the implementation under test, plus seeding helpers where the port cannot seed itself):

- ports of the domain: ``token_counter``, ``history_policy``, ``compactor``, ``memory_rules``,
  ``run_lock``, ``thread_lock``, ``run_records``, ``transcript_archive``, ``retention``,
  ``followups``;
- ``summarizer`` (``domain.summary.Summarizer``) and ``memory_extractor``
  (``app.memory.MemoryExtractor``);
- ``backend``: an opened storage profile (``adapters.profile.Backend``) as the run service uses
  it — rounds stored whole or not at all, cold start, deletion, erasure, retention.

``in_memory`` is a complete profile on langgraph's in-memory saver and store and the domain's
fakes: the reference for the backend suite, the backend of the run service's unit tests, and
the worked example of ``README.md`` (``docs/writing-a-backend.md``).

The suites are written for pytest-asyncio's ``asyncio_mode = "auto"`` (their async tests and
fixtures carry no marker).
"""
