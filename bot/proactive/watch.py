"""`triage watch DIR`: watch a job-log directory (an FSx for Lustre job folder, a shared Kubernetes volume) and post
a job's diagnosis once its logs have stopped growing and show a failure — once per job, remembered in the store so
a restart neither posts twice nor forgets a job that was quiet last time.

A job is a sub-directory of DIR (all the log files under it, read together), or the top-level log files that share
a Slurm job id in their names (`slurm-1234.out` + `slurm-1234.err`), or else one top-level file."""
from __future__ import annotations

import json
import logging
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator


log = logging.getLogger("triage.watch")
JOB_ID = re.compile(r"(?:slurm|job)[-_]?(\d+)", re.I)
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """60, 60s, 2m, 1h, 7d → seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if not m:
        raise ValueError(f"'{text}' is not a duration like 60s, 2m, 1h or 7d")
    return float(m.group(1)) * UNITS[m.group(2) or "s"]


def jobs_in(root: str, follow_links: bool = False) -> dict[str, list[tuple[str, str]]]:
    """job key → (path, name shown) of its log files. A file reached through a symbolic link that leaves `root`
    (another user's file, /proc, a device) is never read unless `follow_links` says the operator wants that."""
    jobs: dict[str, list[tuple[str, str]]] = {}
    try:
        entries = sorted(os.scandir(root), key=lambda e: e.name)
    except OSError as e:
        log.warning("cannot list %s: %s", root, e)
        return jobs
    kinds = (("dir" if e.is_dir(follow_symlinks=False) else "file" if e.is_file() else "other", e.name, e.path)
             for e in entries)
    inside = os.path.join(os.path.realpath(root), "")
    for job, files in group_jobs(kinds, folder_files):
        kept = files if follow_links else [f for f in files if os.path.realpath(f[0]).startswith(inside)]
        if len(kept) < len(files):
            log.warning("job %s: %d file(s) behind a symbolic link out of %s not read (--follow-symlinks reads them)",
                        job, len(files) - len(kept), root)
        if kept:
            jobs.setdefault(job, []).extend(kept)
    return jobs


def folder_files(path: str) -> list[tuple[str, str]]:
    """A job folder's log files, (path, name inside it); none for a folder without any."""
    from core.inputs import log_paths
    paths, _ = log_paths([path])
    return paths if paths and paths[0][0] != path else []   # a folder without log files is kept as-is by log_paths


def group_jobs(entries: Iterable[tuple[str, str, str]],
               files_of: Callable[[str], list[tuple[str, str]]]) -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """The jobs among a folder's entries, (kind 'dir'/'file'/'other', name, path) each: a sub-folder is one job
    (its log files, from `files_of`), yielded as soon as it is seen; top-level log files sharing a Slurm job id in
    their names are one job, the others one each, yielded once every entry was seen (`triage fleet` lists S3
    prefixes the same way)."""
    from core.inputs import LOG_SUFFIXES
    loose: dict[str, list[tuple[str, str]]] = {}
    for kind, name, path in entries:
        if name.startswith("."):
            continue
        if kind == "dir":
            paths = files_of(path)
            if paths:
                yield name, [(p, f"{name}/{n}") for p, n in paths]
        elif kind == "file" and name.lower().endswith(LOG_SUFFIXES):
            m = JOB_ID.search(name)
            loose.setdefault(f"slurm:{m.group(1)}" if m else name.split(".")[0], []).append((path, name))
    yield from loose.items()


def signature(paths: list[tuple[str, str]]) -> tuple[str, float] | None:
    """(what the files look like now, the newest mtime), or None when one vanished mid-scan."""
    try:
        stats = [(name, os.stat(p)) for p, name in paths]
    except OSError:
        return None
    sig = json.dumps([(n, s.st_size, s.st_mtime_ns) for n, s in stats])
    return sig, max(s.st_mtime for _, s in stats)


class JobFailed(str):
    """What `scan` says of a job whose logs could not be read or diagnosed (EIO, a bug): recorded, the pass goes on."""


@dataclass
class Watcher:
    root: str
    notifier: object          # bot.proactive.notify.Notifier
    settle: float = 60.0
    max_age: float = 86400.0
    follow_links: bool = False   # read files behind symbolic links that leave `root` (the operator's choice)

    def _key(self, job: str) -> str:
        return f"{os.path.abspath(self.root)}::{job}"

    def _seen(self, job: str) -> dict | None:
        rows = list(self.notifier.store.db.query("select * from watched where job = ?", [self._key(job)]))
        return rows[0] if rows else None

    def _mark(self, job: str, sig: str, status: str, did: int | None = None) -> None:
        from bot.store.store import now
        with self.notifier.store.write() as db:
            db["watched"].upsert({"job": self._key(job), "signature": sig, "status": status, "diagnosis_id": did,
                                  "at": now()}, pk="job")

    def scan(self, at: float | None = None) -> list[tuple[str, object]]:
        """One pass: diagnose every job that settled since it was last seen; post the ones with a finding."""
        at = time.time() if at is None else at
        done = []
        for job, paths in jobs_in(self.root, self.follow_links).items():
            seen = signature(paths)
            if seen is None or not (self.settle <= at - seen[1] <= self.max_age):
                continue   # still growing, or older than --max-age (not this watcher's to announce)
            sig, row = seen[0], self._seen(job)
            if row and (row["status"] == "posted" or row["signature"] == sig):
                continue
            try:
                out = self._handle(job, paths, sig)
            except Exception as e:   # one job's bad file (EIO, a bug it triggers) never ends the pass for the rest
                why = f"{type(e).__name__}: {str(e)[:200]}"
                log.warning("job %s failed: %s", job, why)
                self._mark(job, sig, "failed")   # tried again when its files change
                out = JobFailed(f"failed: {why}")
            done.append((job, out))
        return done

    def _handle(self, job: str, paths: list[tuple[str, str]], sig: str):
        from core.ingest import ReadError, UnusableInput
        try:
            d = self.notifier.diagnose(paths, f"{job} ({len(paths)} files)")
        except ReadError as e:   # the file failed, not the log: a failure of this job's triage
            self._mark(job, sig, "failed")
            return JobFailed(f"failed: {e}")
        except UnusableInput as e:
            self._mark(job, sig, "unreadable")
            return f"unreadable: {e}"
        if not d.findings:
            self._mark(job, sig, "clean")   # looked at again only if its files change
            return "clean"
        try:
            out = self.notifier.job(paths, job, diagnosis=d)
        except Exception as e:   # Slack refused for good: retried when the files change, not on every pass
            from bot.proactive.notify import slack_error
            self._mark(job, sig, "failed")
            return f"not posted: {slack_error(e)}"
        self._mark(job, sig, "posted", out.diagnosis_id)
        return out

    def run(self, stop: threading.Event, every: float) -> int:
        """Scan until `stop` is set (a set one: a single pass), saying on stdout what each job got (a failed job on
        stderr too). Returns how many jobs failed, or the pass itself did, in the last pass."""
        from bot.proactive.notify import said
        from bot.answer.render import terminal_safe
        while True:
            failed = 0
            try:
                for job, out in self.scan():
                    line = f"triage: {job}: " + (out if isinstance(out, str) else said(out, self.notifier.channel)
                                                 .removeprefix("triage: "))
                    print(terminal_safe(line), flush=True)
                    if isinstance(out, JobFailed):
                        failed += 1
                        print(terminal_safe(line), file=sys.stderr, flush=True)
            except Exception as e:   # a locked database, a vanished mount: said, and the next pass tries again
                failed += 1
                print(f"triage: watch pass failed ({type(e).__name__}: {str(e)[:200]}); retrying", file=sys.stderr,
                      flush=True)
            if stop.wait(every):
                return failed
