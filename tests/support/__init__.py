"""Test support shared by the suites (fakes, not mocks)."""
