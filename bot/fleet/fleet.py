"""`triage fleet SOURCE…`: triage every job under directories, globs or s3://bucket/prefix addresses on Ray (Ray
Data tasks, one per job or a few jobs), or on this machine's processes with --jobs N. Each job is read as `triage
diagnose --together` reads it, with the same engine; each result is one JSON line: triage.diagnosis/v1 plus
`fleet` = {source, job, status} (a job that failed or is not a log: `fleet` alone, its reason in `error`). --record
stores the results from this process only (one writer), once per job and file signature: a rerun skips what is
unchanged.

Listing, reading and the executors: bot/fleet/jobs.py, bot/fleet/s3.py, bot/fleet/run.py."""
from __future__ import annotations

import json
import os
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


def _options(args) -> tuple[float | None, float] | str:
    """(--since in seconds or None, --timeout in seconds), or what is wrong with them."""
    from bot.proactive.watch import duration
    try:
        return (duration(args.since) if args.since else None), duration(args.timeout)
    except ValueError as e:
        return str(e)


def _missing(args) -> str | None:
    """Why this run cannot start on this installation (no Ray, no boto3 for S3), or None."""
    import importlib.util
    from bot.fleet.run import INSTALL, ray_missing
    if args.jobs and args.ray is not None:
        return "--ray and --jobs: choose one (--jobs N reads on this machine without Ray)"
    if not args.jobs and ray_missing():
        return ray_missing()
    if any(s.startswith("s3://") for s in args.sources) and importlib.util.find_spec("boto3") is None:
        return INSTALL.replace("runs on Ray", "reads S3 with boto3")
    return None


def cmd_fleet(args, settings) -> int:
    from bot.fleet.jobs import Spec, list_jobs
    from bot.fleet.run import on_processes, on_ray
    from bot.wiring import engine, store
    opts, why = _options(args), _missing(args)
    if isinstance(opts, str) or why:
        print(f"triage: {why or opts}", file=sys.stderr)
        return 2
    since, timeout = opts
    endpoint = args.s3_endpoint or os.environ.get("AWS_ENDPOINT_URL") or None
    spec = Spec(engine(settings), settings.max_bytes, args.lang, timeout, endpoint)
    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
    fleet = Fleet(out, store(settings) if args.record else None, since, sys.stderr.isatty())
    todo = fleet.todo(list_jobs(args.sources, endpoint))
    if args.jobs:
        rows, where = on_processes(todo, spec, args.jobs), f"this machine ({args.jobs} process(es))"
    else:
        address = args.ray or "local"
        rows, where = on_ray(todo, spec, address, args.workers), f"Ray ({address})"
    try:
        for row in rows:
            fleet.take(row)
    finally:
        if fleet.progress:
            sys.stderr.write("\n")
        if args.out:
            out.close()
    print(fleet.summary(where), file=sys.stdout if args.out else sys.stderr)
    return 1 if fleet.status["failed"] else 0


def _count(text: str) -> int:
    import argparse
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a whole number, 1 or more, not {text!r}")
    return int(text)


def add_parser(sub) -> None:
    f = sub.add_parser("fleet", help="triage every job under directories, globs or S3 prefixes, on Ray",
                       description="Triage a whole fleet's job logs: every job (a sub-directory or prefix, or the "
                                   "files sharing a Slurm job id) read as one log, as diagnose --together does, by "
                                   "Ray Data tasks or --jobs N local processes. Exit 0; 1 when a job failed; 2 when "
                                   "the run cannot start (no Ray: pip install '.[fleet]').")
    f.add_argument("sources", nargs="+", metavar="SOURCE",
                   help="a directory of job logs, a glob ('/fsx/logs/2026-*'), or s3://bucket/prefix")
    f.add_argument("--since", help="only jobs whose newest log changed within this span (7d, 24h; default: all)")
    f.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="local (default: a Ray started here), auto (the cluster this machine belongs to), or a "
                        "cluster address (ray://head:10001)")
    f.add_argument("--workers", type=_count, default=0, metavar="N",
                   help="at most N jobs read at once (default: every CPU Ray has; with --ray local, Ray starts with N)")
    f.add_argument("--jobs", type=_count, default=0, metavar="N",
                   help="read on this machine with N processes instead, without Ray")
    f.add_argument("--record", action="store_true",
                   help="store the results in TRIAGE_DB (for the weekly report), once per job and file signature")
    f.add_argument("--out", metavar="FILE", help="write the JSON lines here (default: stdout)")
    f.add_argument("--timeout", default="10m", help="give up on one job after this long (default 10m)")
    f.add_argument("--s3-endpoint", metavar="URL",
                   help="an S3-compatible endpoint (default: AWS_ENDPOINT_URL, else AWS's own)")
    f.add_argument("--lang", choices=("en", "ko"), default="en")
    f.set_defaults(func=cmd_fleet)
