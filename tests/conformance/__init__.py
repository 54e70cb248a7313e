"""Port conformance suites: written once, run unchanged against every adapter.

Each suite is a base class of tests that needs one fixture from its subclass (a factory of
the adapter under test, plus seeding helpers where the port cannot seed itself). The
in-memory implementations pass them first (``tests/unit/domain/test_conformance.py``); each
later adapter subclasses the same suites in its own test module, against a real server.
"""
