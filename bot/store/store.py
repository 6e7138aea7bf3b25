"""Every diagnosis, its findings and the feedback on it, in SQLite through sqlite-utils (WAL, migrations).

One connection per thread (Bolt runs listeners on worker threads). Text is masked for secrets before it is
written, so the database never holds a token or key even if one slipped past the parsers."""
from __future__ import annotations

import hashlib
import json
import logging
import re
import sqlite3
import threading
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import sqlite_utils
from bot.store.migrations import migrations

from bot.settings import SettingsError
from core import symptoms
from core.models import Diagnosis
from core.redact import mask_secrets, mask_value

log = logging.getLogger("triage.store")


def load_doc(raw, diagnosis_id=None) -> dict | None:
    """A stored diagnosis' JSON, or None (with one log line) when the row is damaged: one bad row must never take
    down a report, a vote or an export."""
    try:
        doc = json.loads(raw) if raw else None
    except (ValueError, TypeError, RecursionError):
        doc = None
    if not isinstance(doc, dict):
        log.warning("diagnosis #%s in the store cannot be read; skipped", diagnosis_id)
        return None
    return doc



class StoreError(SettingsError):
    """TRIAGE_DB cannot be opened or written (a settings problem to the CLI: one line, exit code 2)."""


def now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def job_key_for(d: Diagnosis, given: str = "") -> str:
    """Which job a log belongs to: the name given, a Slurm job id in the log or file name, else the file name."""
    if given:
        return given
    env = d.job.get("env", {}) if isinstance(d.job.get("env"), dict) else {}
    for key in ("SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"):
        if env.get(key):
            return f"{key.lower()}:{env[key]}"
    m = re.search(r"slurm-(\d+)", d.input.name) or re.search(r"job[-_]?(\d{3,})", d.input.name)
    return f"slurm:{m.group(1)}" if m else d.input.name


class Store:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._local = threading.local()
        self._uri: str | None = None
        self.readonly = False   # True when the database can only be read (a read-only file, mount or directory)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._migrate()
        except (sqlite3.DatabaseError, OSError) as e:
            if not self._open_read_only():
                raise StoreError(f"TRIAGE_DB {self.path}: cannot open the database ({e})") from None

    def _migrate(self, patience: float = 60.0) -> None:
        """WAL mode and the migrations, also when several processes open a fresh database at once: the migrations
        run in one write transaction taken up front (BEGIN IMMEDIATE waits for the others), so each sees what the
        one before it applied; switching to WAL, which cannot wait for a lock, is retried until `patience` runs out."""
        import random
        import time
        deadline = time.monotonic() + patience
        while True:
            try:
                db = self.db
                if db.conn.execute("pragma journal_mode").fetchone()[0].lower() != "wal":
                    db.enable_wal()
                with self.write():
                    migrations.apply(db)
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(random.uniform(0.02, 0.2))

    def _open_read_only(self) -> bool:
        """An existing database that cannot be written (read-only file or directory, a full disk before WAL could
        be set up) is still read: reports and backups work, and each write fails with its own one-line note."""
        if not self.path.is_file():
            return False
        from urllib.parse import quote
        for mode in ("mode=ro", "immutable=1"):   # immutable: WAL's -shm cannot be created beside it
            self._local = threading.local()
            self._uri = f"file:{quote(str(self.path.resolve()))}?{mode}"
            try:
                self.db.execute("select count(*) from diagnoses").fetchone()
            except sqlite3.Error:
                continue
            self.readonly = True
            log.warning("TRIAGE_DB %s cannot be written; reading it only", self.path)
            return True
        return False

    def verify(self) -> None:
        """PRAGMA quick_check: corrupt pages behind an intact header are found before the bot relies on them."""
        try:
            rows = [r[0] for r in self.db.conn.execute("pragma quick_check").fetchall()]
        except sqlite3.DatabaseError as e:
            rows = [str(e)]
        if rows != ["ok"]:
            raise StoreError(f"TRIAGE_DB {self.path}: the database is damaged ({'; '.join(rows[:2])[:200]}); "
                             "restore a backup (triage db backup) or move the file away")

    @contextmanager
    def write(self):
        """A write transaction that takes the write lock up front (BEGIN IMMEDIATE), so concurrent writers wait
        for each other (busy_timeout) instead of failing with 'database is locked'."""
        db = self.db
        if db.conn.in_transaction:  # nested: a savepoint inside the open transaction
            with db.atomic():
                yield db
            return
        db.conn.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            if db.conn.in_transaction:   # SQLite already rolled back after SQLITE_FULL: keep that error
                db.conn.execute("ROLLBACK")
            raise
        db.conn.execute("COMMIT")

    @property
    def db(self) -> sqlite_utils.Database:
        db = getattr(self._local, "db", None)
        if db is None:
            uri = getattr(self, "_uri", None)
            conn = sqlite3.connect(uri or str(self.path), uri=uri is not None, timeout=10)
            conn.execute("pragma busy_timeout = 10000")
            conn.execute("pragma foreign_keys = on")
            db = self._local.db = sqlite_utils.Database(conn)
        return db

    def record(self, d: Diagnosis, data: bytes | str | None = None, *, source: str = "cli", team: str = "",
               channel: str = "", user: str = "", thread_ts: str = "", job_key: str = "", at: str | None = None) -> int:
        """Commit the diagnosis (and its findings) and return its id. Call before sending any answer. `data`: the
        input's bytes, or their sha256 already computed (bot.service.input_digest)."""
        doc = json.dumps(mask_value(d.to_json_dict()), ensure_ascii=False)   # values masked, never the JSON text
        top = d.findings[0] if d.findings else None
        row = {
            "created_at": at or now(), "source": source, "team": team, "channel": channel, "user": user,
            "thread_ts": thread_ts, "message_ts": "", "input_name": mask_secrets(d.input.name),
            "input_sha256": (data if isinstance(data, str) else hashlib.sha256(data).hexdigest()) if data else "",
            "input_bytes": d.input.bytes, "lines": d.input.lines, "truncated": int(d.input.truncated),
            "top_symptom": top.symptom if top else "none", "top_title": mask_secrets(top.title) if top else "",
            "findings_count": len(d.findings), "job_key": mask_secrets(job_key_for(d, job_key)), "diagnosis_json": doc,
            "vote": None, "vote_user": None, "correct_symptom": None,
        }
        db = self.db
        with self.write():
            did = db["diagnoses"].insert(row).last_pk
            db["findings"].insert_all({
                "diagnosis_id": did, "idx": i, "symptom": f.symptom, "rule": f.rule, "severity": f.severity,
                "title": mask_secrets(f.title), "caused_by": f.caused_by,
                "facts_json": json.dumps(mask_value(f.facts), ensure_ascii=False), "first_line": f.first_line,
            } for i, f in enumerate(d.findings))
            db["nodes"].insert_all(self._nodes(did, d))
            db["unclaimed"].insert_all({"diagnosis_id": did, "template": mask_secrets(u["template"]),
                                        "count": u["count"], "example": mask_secrets(u["example"])} for u in d.unclaimed)
            db["benchmarks"].insert_all({
                "diagnosis_id": did, "op": b["op"], "instance": b.get("instance"), "nodes": b.get("nodes"),
                "ranks": b.get("ranks"), "max_size_bytes": b["max_size_bytes"], "max_size_busbw": b["max_size_busbw"],
                "rows_json": json.dumps([{k: r[k] for k in ("size_bytes", "busbw", "algbw")} for r in b["rows"]]),
            } for b in d.benchmarks)
        return int(did)

    @staticmethod
    def _nodes(did: int, d: Diagnosis):
        seen = set()
        for f in d.findings:
            declared = symptoms.get(f.symptom)
            for fact, role in (declared.host_facts.items() if declared else ()):
                hosts = f.facts.get(fact)
                for h in hosts if isinstance(hosts, list) else []:
                    if (h, f.symptom, role) not in seen:
                        seen.add((h, f.symptom, role))
                        yield {"diagnosis_id": did, "host": h, "role": role, "symptom": f.symptom}

    def job_thread(self, job_key: str, channel: str) -> str | None:
        """The ts of the first answer posted about this job in this channel: later ones go in its thread."""
        rows = list(self.db.query("select message_ts from diagnoses where job_key = ? and channel = ? and "
                                  "message_ts != '' order by id limit 1", [job_key, channel]))
        return rows[0]["message_ts"] if rows else None

    def set_message(self, diagnosis_id: int, channel: str, ts: str) -> None:
        with self.write():
            self.db["diagnoses"].update(diagnosis_id, {"message_ts": ts, "channel": channel})

    def get(self, diagnosis_id: int) -> dict[str, Any] | None:
        try:
            return self.db["diagnoses"].get(diagnosis_id)
        except sqlite_utils.db.NotFoundError:
            return None

    def diagnosis(self, diagnosis_id: int) -> Diagnosis | None:
        """The stored diagnosis, or None when there is none or its row cannot be read (see load_doc)."""
        row = self.get(diagnosis_id)
        doc = load_doc(row["diagnosis_json"], diagnosis_id) if row else None
        if not doc:
            return None
        try:
            return Diagnosis.from_dict(doc)
        except (KeyError, TypeError, ValueError, AttributeError):
            log.warning("diagnosis #%s in the store is not a diagnosis; skipped", diagnosis_id)
            return None

    def vote(self, diagnosis_id: int, user: str, vote: str, symptom: str | None = None, cause: str = "") -> None:
        db = self.db
        with self.write():
            db["feedback"].insert({"diagnosis_id": diagnosis_id, "at": now(), "user": user, "vote": vote,
                                   "symptom": symptom})
            patch = {"vote": vote, "vote_user": user}
            if symptom:
                patch["correct_symptom"] = symptom
            if cause:
                patch["correct_text"] = mask_secrets(cause.strip())[:1000]
            db["diagnoses"].update(diagnosis_id, patch)

    def first_time(self, event_id: str) -> bool:
        """True the first time an event id is seen (Slack retries deliver the same id again)."""
        try:
            with self.write():
                self.db.execute("insert into events (event_id, at) values (?, ?)", [event_id, now()])
            return True
        except sqlite3.IntegrityError:
            return False
        except sqlite3.Error as e:   # disk full, read-only: answer (a retry may then be answered again), never drop
            log.error("event %s not remembered (%s); answering it anyway", event_id, e)
            return True

    @staticmethod
    def _visible(team: str | None, viewer: tuple[str, list[str]] | None) -> tuple[str, list[Any]]:
        """SQL for the rows one person may see: their team, and with `viewer` = (user, channels) only their own
        diagnoses and those made in channels they are in."""
        where, args = ["1 = 1"], []
        if team:
            where.append("team = ?")
            args.append(team)
        if viewer is not None:
            user, channels = viewer
            marks = ", ".join("?" for _ in channels) or "''"
            where.append(f"(user = ? or channel in ({marks}))")
            args += [user, *channels]
        return " and ".join(where), args

    def recent(self, limit: int = 10, team: str | None = None,
               viewer: tuple[str, list[str]] | None = None) -> list[dict[str, Any]]:
        where, args = self._visible(team, viewer)
        return list(self.db["diagnoses"].rows_where(where, args, order_by="id desc", limit=limit,
                                                   select="id, created_at, channel, user, top_symptom, top_title, vote"))

    def counts_since(self, days: int = 7, team: str | None = None,
                     viewer: tuple[str, list[str]] | None = None) -> dict[str, int]:
        since = (datetime.now(timezone.utc) - timedelta(days=days)).isoformat(timespec="seconds")
        where, args = self._visible(team, viewer)
        sql = f"select top_symptom, count(*) n from diagnoses where created_at >= ? and {where}"
        sql += " group by top_symptom order by n desc"
        return {r["top_symptom"]: r["n"] for r in self.db.query(sql, [since, *args])}

    def llm_cached(self, key: str) -> str | None:
        rows = list(self.db.query("select answer_json from llm_cache where key = ?", [key]))
        return rows[0]["answer_json"] if rows else None

    def llm_log(self, *, diagnosis_id: int | None, model: str, lang: str, prompt: str, response: str, outcome: str,
                ms: int, cache_key: str | None, answer: str | None) -> None:
        """Every prompt and answer is kept (already masked by the caller; secrets masked again here)."""
        with self.write():
            self.db["llm_log"].insert({"at": now(), "diagnosis_id": diagnosis_id, "model": model, "lang": lang,
                                       "prompt": mask_secrets(prompt), "response": mask_secrets(response),
                                       "outcome": outcome, "ms": ms})
            if cache_key and answer:
                self.db["llm_cache"].upsert({"key": cache_key, "created_at": now(), "model": model, "lang": lang,
                                             "answer_json": answer}, pk="key")
            if diagnosis_id is not None:
                self.db["diagnoses"].update(diagnosis_id, {"llm_outcome": outcome})

    def backup(self, dest: str | Path) -> None:
        """SQLite's online backup: safe while the bot is writing."""
        target = sqlite3.connect(str(dest))
        try:
            self.db.conn.backup(target)
        finally:
            target.close()
