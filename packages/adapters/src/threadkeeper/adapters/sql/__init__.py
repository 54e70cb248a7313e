"""threadkeeper's own tables over SQLAlchemy Core, for every profile, by table family.

One implementation runs on SQLite (embedded), PostgreSQL and MySQL/MariaDB. The embedded
profile creates the tables at start; the server profiles get them from ``threadkeeper migrate``.

- ``tables``: the tables, the time type, the upserts, ``SqlAccess`` (a connection or a
  transaction; the embedded profile's one SQLite connection is used under one lock, the server
  profiles pass none);
- ``texts``: the texts of run records, stored once per thread and digest, and a record's
  stored (compressed) shape;
- ``fences``: each thread's claim and each user's erasure fence (``SqlRunFences``);
- ``records``: run records, feedback and the round's follow-up rows (``SqlRunRecords``). A
  round's run record is written by the profile's round store inside the transaction that
  stores the round (``insert_record``), not by ``SqlRunRecords.save``.

The names other modules use are re-exported here.
"""

from threadkeeper.adapters.sql.fences import SqlRunFences, check_claim, user_fence
from threadkeeper.adapters.sql.records import (
    CANCEL_WAIT_SECONDS,
    SqlRunRecords,
    insert_record,
    record_followups,
    record_row,
)
from threadkeeper.adapters.sql.tables import (
    SqlAccess,
    UtcDateTime,
    feedback,
    followups,
    metadata,
    run_claims,
    run_records,
    run_texts,
    summaries_ahead,
    upsert,
    user_fences,
)
from threadkeeper.adapters.sql.texts import (
    COMPRESSED_RECORD,
    MAX_DEPTH,
    RECORD_ZDICT,
    RecentTexts,
    StoredRecord,
    pack_record,
    unpack_record,
)

__all__ = [
    "CANCEL_WAIT_SECONDS",
    "COMPRESSED_RECORD",
    "MAX_DEPTH",
    "RECORD_ZDICT",
    "RecentTexts",
    "SqlAccess",
    "SqlRunFences",
    "SqlRunRecords",
    "StoredRecord",
    "UtcDateTime",
    "check_claim",
    "feedback",
    "followups",
    "insert_record",
    "metadata",
    "pack_record",
    "record_followups",
    "record_row",
    "run_claims",
    "run_records",
    "run_texts",
    "summaries_ahead",
    "unpack_record",
    "upsert",
    "user_fence",
    "user_fences",
]
