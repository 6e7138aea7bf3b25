"""What `triage fleet` reads: the jobs under each SOURCE (a directory, a glob or an s3://bucket/prefix), listed
lazily in the units `triage watch` uses, and one job's diagnosis — the body of each Ray task (or local worker):
all its files read together, as `triage diagnose --together` reads them, with the same engine."""
from __future__ import annotations

import glob
import json
import os
import time
from dataclasses import dataclass, field
from typing import Iterator

from core.ingest import ReadError, UnusableInput
from core.inputs import Joined

TIMEOUT = 600.0   # seconds one job may take by default (--timeout)


@dataclass
class Job:
    source: str                     # the SOURCE it was found under (a directory made absolute)
    job: str                        # its key in that source: a folder or prefix name, slurm:ID, a file's stem
    files: list[tuple[str, str]]    # (path or s3://bucket/key, name shown)
    signature: str = ""             # what its files look like now (names, sizes, mtimes or ETags)
    newest: float = 0.0             # its newest file's modification time (epoch seconds)

    @property
    def key(self) -> str:
        return f"{self.source}::{self.job}"

    def item(self) -> dict[str, str]:
        """What travels to the task: strings only (Ray Data keeps rows as Arrow columns)."""
        return {"source": self.source, "job": self.job, "files": json.dumps(self.files)}


@dataclass
class Unlisted:
    """A SOURCE that could not be listed (no such directory, no match, S3 refused): a failed row, not a crash."""
    source: str
    reason: str


def list_jobs(sources: list[str], endpoint: str | None = None) -> Iterator[Job | Unlisted]:
    """Every job under every SOURCE, as the listing goes (an S3 prefix page by page)."""
    for src in sources:
        try:
            if src.startswith("s3://"):
                yield from _s3_jobs(src, endpoint)
            elif os.path.isdir(src):
                yield from _dir_jobs(src)
            else:
                yield from _glob_jobs(src)
        except Exception as e:   # access denied on the bucket, a vanished mount: this source fails, not the run
            yield Unlisted(src, _why(e))


def _why(e: BaseException) -> str:
    from core.redact import mask_secrets
    return mask_secrets(f"{type(e).__name__}: {str(e)[:200]}")


def _dir_jobs(root: str) -> Iterator[Job]:
    from bot.proactive.watch import jobs_in, signature
    root = os.path.abspath(root)
    for job, files in jobs_in(root).items():
        seen = signature(files)
        if seen is not None:   # (a file that vanished since the listing: not there to read)
            yield Job(root, job, files, *seen)


def _glob_jobs(pattern: str) -> Iterator[Job]:
    """A glob's matches as the entries of one folder: a matched folder is a job (named by its path below the
    pattern's fixed part), matched log files sharing a Slurm job id are one."""
    from bot.proactive.watch import folder_files, group_jobs, signature
    matches = sorted(glob.glob(pattern, recursive=True))
    if not matches:
        raise FileNotFoundError(f"{pattern}: no directory or file matches")
    parts = pattern.split("/")   # (a plain file's path: its folder is the fixed part)
    fixed = "/".join(parts[:next((i for i, part in enumerate(parts) if glob.has_magic(part)), len(parts) - 1)]) or "."
    entries = (("dir", os.path.relpath(m, fixed), m) if os.path.isdir(m) else
               ("file" if os.path.isfile(m) else "other", os.path.basename(m), m) for m in matches)
    for job, files in group_jobs(entries, folder_files):
        seen = signature(files)
        if seen is not None:
            yield Job(pattern, job, files, *seen)


def _s3_jobs(uri: str, endpoint: str | None) -> Iterator[Job]:
    from bot.fleet.s3 import Listing
    from bot.proactive.watch import group_jobs
    listing = Listing(uri, endpoint)
    for job, files in group_jobs(listing.entries(), listing.files_of):
        seen = listing.signature(files)
        if seen is not None:
            yield Job(uri, job, files, *seen)


class JobTimeout(Exception):
    """A job that took longer than --timeout (checked between chunks; a stalled S3 read has its own timeout)."""


@dataclass
class _Timed(Joined):
    """The job's files read as one log, given up on past `deadline` (time.monotonic())."""
    deadline: float = field(default=float("inf"))
    limit: float = 0.0

    def chunks(self):
        for chunk in super().chunks():
            if time.monotonic() > self.deadline:
                raise JobTimeout(f"timed out after {self.limit:g} s (--timeout)")
            yield chunk


@dataclass
class Spec:
    """What every task needs, the same for each: the engine as `triage diagnose` builds it (playbooks, team rules,
    parser options, scanner backend), the size cap, the language, the per-job time limit, the S3 endpoint."""
    engine: object
    max_bytes: int
    lang: str = "en"
    timeout: float = TIMEOUT
    endpoint: str | None = None


def _opener(loc: str, name: str, spec: Spec):
    from core.inputs import expand, open_inputs
    if loc.startswith("s3://"):
        def s3():
            from bot.fleet.s3 import open_object
            return expand(open_object(loc, spec.max_bytes, name, spec.endpoint))
        return s3
    return lambda: open_inputs(loc, spec.max_bytes, name)


def read_job(item: dict[str, str], spec: Spec) -> dict[str, object]:
    """One job's row: status diagnosed / clean with the diagnosis JSON (triage.diagnosis/v1) in `doc`, or failed /
    unreadable with the reason in `error`. Never raises: one bad job is one row."""
    files = [tuple(f) for f in json.loads(item["files"])]
    row: dict[str, object] = {"source": item["source"], "job": item["job"], "status": "", "error": "", "doc": "",
                              "bytes": 0}   # every row has every column (Ray Data keeps rows as Arrow tables)
    started = time.monotonic()
    joined = _Timed(f"{item['job']} ({len(files)} files)", [_opener(p, n, spec) for p, n in files],
                    deadline=started + spec.timeout, limit=spec.timeout)
    try:
        d = spec.engine.diagnose(joined, spec.lang)
    except ReadError as e:   # the file failed (S3 refused it, EIO), not the log
        return {**row, "status": "failed", "error": str(e)}
    except UnusableInput as e:   # not a log, an empty or damaged archive
        return {**row, "status": "unreadable", "error": str(e)}
    except JobTimeout as e:
        return {**row, "status": "failed", "error": str(e), "bytes": joined.bytes_read}
    except Exception as e:   # a bug this job's logs trigger: said, and the run goes on
        return {**row, "status": "failed", "error": _why(e)}
    return {**row, "status": "diagnosed" if d.findings else "clean", "doc": json.dumps(d.to_json_dict()),
            "bytes": d.input.bytes}
