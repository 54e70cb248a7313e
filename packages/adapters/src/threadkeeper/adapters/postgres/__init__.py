"""The postgres profile (ADR-0007): adapters arrive with the postgres profile."""
