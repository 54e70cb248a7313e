"""The embedded profile (SQLite under THREADKEEPER_DATA_DIR).

Its adapters arrive with the embedded service (issue 3)."""
