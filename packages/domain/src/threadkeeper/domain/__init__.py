"""threadkeeper.domain — pure rules and ports. No I/O, no framework, no driver.

Modules: ``tokens`` (TokenCounter), ``history`` (HistoryPolicy), ``compaction`` (Compactor),
``summary`` (rolling summary), ``memory`` (MemoryRules) with ``pii``, ``locks`` (RunLock),
``transcript`` (TranscriptArchive), ``retention`` (Retention), ``threads`` (thread keys).
"""
