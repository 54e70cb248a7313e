"""The ``RetentionConformance`` harness for backends whose transcript is the checkpoints: now
published with the suite (``threadkeeper.conformance.retention``); re-exported here."""

from threadkeeper.conformance.retention import CheckpointRetentionHarness

__all__ = ["CheckpointRetentionHarness"]
