"""The store's schema, one migration per change, applied in order by sqlite-utils (names are recorded in the
database: a migration is never renamed or edited once released, only a new one added)."""
from __future__ import annotations

import sqlite_utils
from sqlite_utils import Migrations


migrations = Migrations("train-triage")


@migrations()
def m001_initial(db: sqlite_utils.Database) -> None:
    db["diagnoses"].create({
        "id": int, "created_at": str, "source": str, "team": str, "channel": str, "user": str, "thread_ts": str,
        "message_ts": str, "input_name": str, "input_sha256": str, "input_bytes": int, "lines": int,
        "truncated": int, "top_symptom": str, "top_title": str, "findings_count": int, "job_key": str,
        "diagnosis_json": str, "vote": str, "vote_user": str, "correct_symptom": str,
    }, pk="id")
    db["diagnoses"].create_index(["created_at"])
    db["findings"].create({
        "diagnosis_id": int, "idx": int, "symptom": str, "rule": str, "severity": str, "title": str,
        "caused_by": str, "facts_json": str, "first_line": int,
    }, pk=("diagnosis_id", "idx"), foreign_keys=[("diagnosis_id", "diagnoses", "id")])
    db["findings"].create_index(["symptom"])
    db["feedback"].create({"id": int, "diagnosis_id": int, "at": str, "user": str, "vote": str, "symptom": str},
                          pk="id", foreign_keys=[("diagnosis_id", "diagnoses", "id")])
    db["events"].create({"event_id": str, "at": str}, pk="event_id")


@migrations()
def m002_llm(db: sqlite_utils.Database) -> None:
    db["llm_cache"].create({"key": str, "created_at": str, "model": str, "lang": str, "answer_json": str}, pk="key")
    db["llm_log"].create({"id": int, "at": str, "diagnosis_id": int, "model": str, "lang": str, "prompt": str,
                          "response": str, "outcome": str, "ms": int}, pk="id")


@migrations()
def m003_report(db: sqlite_utils.Database) -> None:
    db["nodes"].create({"diagnosis_id": int, "host": str, "role": str, "symptom": str},
                       foreign_keys=[("diagnosis_id", "diagnoses", "id")])
    db["nodes"].create_index(["host"])
    db["unclaimed"].create({"diagnosis_id": int, "template": str, "count": int, "example": str},
                           foreign_keys=[("diagnosis_id", "diagnoses", "id")])
    db["benchmarks"].create({"diagnosis_id": int, "op": str, "instance": str, "nodes": int, "ranks": int,
                             "max_size_bytes": int, "max_size_busbw": float, "rows_json": str},
                            foreign_keys=[("diagnosis_id", "diagnoses", "id")])


@migrations()
def m004_outbox(db: sqlite_utils.Database) -> None:
    db["outbox"].create({"id": int, "created_at": str, "diagnosis_id": int, "payload_json": str, "attempts": int,
                         "next_at": str, "status": str, "last_error": str}, pk="id")
    db["outbox"].create_index(["status", "next_at"])


@migrations()
def m005_llm_outcome(db: sqlite_utils.Database) -> None:
    """The LLM outcome per diagnosis (was added on first use with alter=True); databases that already have it
    keep it."""
    if "llm_outcome" not in db["diagnoses"].columns_dict:
        db["diagnoses"].add_column("llm_outcome", str)


@migrations()
def m006_outbox_lease(db: sqlite_utils.Database) -> None:
    """Who is posting an outbox item and until when (several `triage serve` on one database), and the ts it got."""
    for column in ("owner", "lease_until", "sent_ts"):
        db["outbox"].add_column(column, str)


@migrations()
def m007_watched(db: sqlite_utils.Database) -> None:
    """What `triage watch` did with each job it saw, so a restart neither posts twice nor forgets a quiet job."""
    db["watched"].create({"job": str, "signature": str, "status": str, "diagnosis_id": int, "at": str}, pk="job")


@migrations()
def m008_typed_cause(db: sqlite_utils.Database) -> None:
    """The root cause a user typed in the 👎 modal, beside the symptom they picked."""
    db["diagnoses"].add_column("correct_text", str)


@migrations()
def m009_work(db: sqlite_utils.Database) -> None:
    """Slack work accepted and not finished yet (bot.store.journal): resumed after a crash."""
    db["work"].create({"id": int, "created_at": str, "kind": str, "key": str, "owner": str, "request_json": str},
                      pk="id")


@migrations()
def m010_fleet(db: sqlite_utils.Database) -> None:
    """What `triage fleet --record` stored for each job (SOURCE::job) and the file signature it was read at."""
    db["fleet"].create({"job": str, "source": str, "name": str, "signature": str, "status": str, "error": str,
                        "diagnosis_id": int, "at": str}, pk="job")
