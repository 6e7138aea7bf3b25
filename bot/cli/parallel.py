"""`triage diagnose` over many files at once: each file (each member of an archive) is diagnosed in a worker
process, and the answers come back in the order the files were given — the same answers as one by one. One big
input (a file, or files read --together) is read by several processes that share out its readers
(engine.split)."""
from __future__ import annotations

import os
from typing import Iterator

POOL_FROM = 64 << 20   # bytes of input in all from which worker processes repay their start-up (~0.3 s each)

_ENGINE = None   # one engine per worker process, built when it starts


def jobs_for(requested: int, paths: list[tuple[str, str]], together: bool) -> int:
    """How many worker processes: --jobs N as given (1: none); by default all cores for two or more files with at
    least POOL_FROM bytes in all, and none for one file, stdin, --together or small inputs."""
    if together or len(paths) < 2 or any(p == "-" for p, _ in paths):
        return 1
    if requested:
        return max(1, min(requested, len(paths)))
    total = sum(os.path.getsize(p) for p, _ in paths if os.path.isfile(p))
    return min(os.cpu_count() or 1, len(paths)) if total >= POOL_FROM else 1


SPLIT_FROM = 32 << 20   # bytes of one input from which its readers may be shared out (forked workers start at once)


def split_jobs(requested: int, paths: list[tuple[str, str]]) -> int:
    """Processes for one input's readers: --jobs N as given; by default all cores when its files hold SPLIT_FROM
    bytes or more (a .gz counted 8 times over: what it unpacks to, roughly), else one. Always one for stdin or any
    other path that is not a regular file: a worker could not read a pipe on its own."""
    if not all(os.path.isfile(p) for p, _ in paths):
        return 1
    if requested:
        return requested
    total = sum(os.path.getsize(p) * (8 if p.endswith(".gz") else 1) for p, _ in paths)
    return (os.cpu_count() or 1) if total >= SPLIT_FROM else 1


def _start(settings) -> None:
    global _ENGINE
    from bot.wiring import engine
    _ENGINE = engine(settings)


def _one(job: tuple[str, str, int, str]) -> list[tuple[str, object]]:
    """A file's outcomes in order: ("doc", Diagnosis) per input in it, ("error", message) for an input that is not
    a log, ("note", text) for what the archive reader noticed, ("bad", message) for a file that cannot be opened."""
    from core.ingest import UnusableInput
    from core.inputs import open_inputs
    path, name, max_bytes, lang = job
    out: list[tuple[str, object]] = []
    notes: list[str] = []
    try:
        for src in open_inputs(path, max_bytes, name, notes):
            try:
                out.append(("doc", _ENGINE.diagnose(src, lang)))
            except UnusableInput as e:
                out.append(("error", str(e)))
    except UnusableInput as e:
        out.append(("bad", str(e)))
        return out
    return out + [("note", n) for n in notes]


def diagnose_files(paths: list[tuple[str, str]], settings, lang: str, jobs: int) -> Iterator[list[tuple[str, object]]]:
    """Each file's outcomes (see _one), in the order of `paths`, from `jobs` worker processes."""
    import multiprocessing   # here: a one-file diagnosis does not pay for importing them
    from concurrent.futures import ProcessPoolExecutor
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")   # fork: nothing to import again
    pool = ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_start, initargs=(settings,))
    try:
        yield from pool.map(_one, [(p, n, settings.max_bytes, lang) for p, n in paths])
    finally:   # a closed pipe (| head) or Ctrl-C: files not started yet are dropped, not diagnosed for nothing
        pool.shutdown(wait=True, cancel_futures=True)
