"""`triage fleet SOURCE…`: triage every job under directories, globs or s3://bucket/prefix addresses on Ray (Ray
Data tasks, one per job or a few jobs), or on this machine's processes with --jobs N. Each job is read as `triage
diagnose --together` reads it, with the same engine; each result is one JSON line: triage.diagnosis/v1 plus
`fleet` = {source, job, status} (a job that failed or is not a log: `fleet` alone, its reason in `error`). --record
stores the results from this process only (one writer), once per job and file signature: a rerun skips what is
unchanged.

Listing, reading and the executors: bot/fleet/jobs.py, bot/fleet/s3.py, bot/fleet/run.py."""
from __future__ import annotations

import json
import sys
import time
from collections import Counter
from typing import Iterator

from bot.fleet.jobs import Job, Unlisted


class Fleet:
    """The driver's side of a run: which jobs to read, and each row as it comes back (printed, recorded, counted)."""

    def __init__(self, out, store=None, since: float | None = None, progress: bool = False) -> None:
        self.out, self.store, self.progress = out, store, progress
        self.cutoff = time.time() - since if since else None
        self.jobs: dict[str, Job] = {}          # listed and sent, not back yet
        self.listed, self.done, self.listing = 0, 0, True
        self.status: Counter = Counter()
        self.symptoms: Counter = Counter()
        self.bytes, self.t0 = 0, time.monotonic()

    def todo(self, found: Iterator[Job | Unlisted]) -> Iterator[Job]:
        """The jobs to read: not older than --since, and with --record not already recorded with these files."""
        for job in found:
            if isinstance(job, Unlisted):
                self.take({"source": job.source, "job": "", "status": "failed", "error": job.reason, "doc": ""})
                continue
            if self.cutoff is not None and job.newest < self.cutoff:
                self.status["older than --since"] += 1
                continue
            if self.store is not None and self._recorded(job):
                self.status["skipped (recorded, unchanged)"] += 1
                continue
            self.jobs[job.key] = job
            self.listed += 1
            yield job
        self.listing = False

    def _recorded(self, job: Job) -> bool:
        rows = list(self.store.db.query("select signature, status from fleet where job = ?", [job.key]))
        return bool(rows) and rows[0]["signature"] == job.signature and rows[0]["status"] != "failed"

    def take(self, row: dict) -> None:
        """One row back: its JSON line, recorded with --record, counted; the progress line redrawn."""
        from bot.answer.render import json_safe
        from core.redact import mask_secrets
        job = self.jobs.pop(f"{row['source']}::{row['job']}", None)
        doc = json.loads(row["doc"]) if row.get("doc") else None
        said = {"source": mask_secrets(str(row["source"])), "job": mask_secrets(str(row["job"])),
                "status": row["status"]}   # (a key of its own: the diagnosis' "job" holds the job's settings)
        if row.get("error"):
            said["error"] = mask_secrets(str(row["error"]))
        line = {**(doc or {}), "fleet": said}
        self.out.write(json_safe(json.dumps(line, ensure_ascii=False)) + "\n")
        self.out.flush()
        if self.store is not None and job is not None:
            self._record(job, row["status"], doc, said.get("error", ""))
        self.done += row["job"] != ""
        self.status[row["status"]] += 1
        self.status["sources not listed"] += row["job"] == ""
        self.symptoms.update(f["symptom"] for f in (doc or {}).get("findings", []))
        self.bytes += int(row.get("bytes") or 0)
        if self.progress:
            self._show()

    def _record(self, job: Job, status: str, doc: dict | None, error: str) -> None:
        """The diagnosis (healthy runs too: their step times feed the report) and the job's signature, together."""
        import sqlite3

        from bot.store.store import now
        from core.models import Diagnosis
        try:
            did = None
            with self.store.write() as db:
                if doc is not None:
                    did = self.store.record(Diagnosis.from_dict(doc), source="fleet", job_key=job.job)
                db["fleet"].upsert({"job": job.key, "source": job.source, "name": job.job, "signature": job.signature,
                                    "status": status, "error": error[:500], "diagnosis_id": did, "at": now()}, pk="job")
        except sqlite3.Error as e:   # a full or locked database: said once per job, the run goes on
            print(f"triage: {job.job}: not stored in TRIAGE_DB ({e})", file=sys.stderr)

    def _show(self) -> None:
        took = max(time.monotonic() - self.t0, 1e-6)
        rate = self.done / took
        total = f"{self.listed}" if not self.listing else f"{self.listed}+ (listing)"
        eta = f", ETA {max(self.listed - self.done, 0) / rate:.0f} s" if rate and not self.listing else ""
        sys.stderr.write(f"\r  fleet: {self.done}/{total} jobs, {rate:.1f} jobs/s{eta}   ")
        sys.stderr.flush()

    def summary(self, where: str) -> str:
        took = time.monotonic() - self.t0
        failed = self.status["failed"]
        head = (f"triage fleet: {self.done} job(s) read in {took:.1f} s ({self.done / max(took, 1e-6):.1f} jobs/s, "
                f"{self.bytes / max(took, 1e-6) / 1e9:.3f} GB/s) on {where}")
        rows = [("jobs", self.done), ("with findings", self.status["diagnosed"]), ("healthy (nothing found)",
                self.status["clean"]), ("failed jobs", failed), ("unreadable (not a log)", self.status["unreadable"])]
        rows += [(k, v) for k, v in self.status.items() if v and k not in ("diagnosed", "clean", "failed", "unreadable")]
        width = max(len(k) for k, _ in rows)
        out = [head, *(f"  {k:<{width}}  {v:>6}" for k, v in rows)]
        if self.symptoms:
            width = max(len(s) for s in self.symptoms)
            out += ["findings by symptom:", *(f"  {s:<{width}}  {n:>6}" for s, n in self.symptoms.most_common())]
        return "\n".join(out)
