"""Where `triage fleet` reads its jobs: Ray Data tasks (a local Ray, `auto`, or a cluster's address), or this
machine's worker processes (`--jobs N`, no Ray needed). Both take the jobs in windows as the listing goes, read
each with bot.fleet.jobs.read_job and hand back its row as soon as it is done, in whatever order they finish."""
from __future__ import annotations

import logging
import uuid
from itertools import islice
from typing import Iterable, Iterator

from bot.fleet.jobs import Job, Spec, read_job

INSTALL = ("triage fleet runs on Ray: install the fleet extra (pip install '.[fleet]' in a checkout, or "
           "pip install 'train-triage[fleet]'), or read on this machine's processes with --jobs N")
BLOCK_JOBS = 8      # jobs per Ray task at most (one task per job costs more in scheduling than a small job's read)
WINDOW_MIN = 64     # jobs handed to Ray at a time, at least (more on a bigger cluster: 32 per worker)


def ray_missing() -> str | None:
    """Why Ray cannot be used here (not installed), or None."""
    import importlib.util
    try:
        found = importlib.util.find_spec("ray") is not None and importlib.util.find_spec("ray.data") is not None
    except (ImportError, ValueError):   # ValueError: sys.modules['ray'] is None (hidden on purpose)
        found = False
    return None if found else INSTALL


def windows(jobs: Iterable[Job], size: int) -> Iterator[list[Job]]:
    it = iter(jobs)
    while window := list(islice(it, size)):
        yield window


def lost(job: Job, why: str) -> dict[str, object]:
    return {"source": job.source, "job": job.job, "status": "failed", "error": why, "doc": "", "bytes": 0}


def start_ray(address: str, workers: int) -> int:
    """Connect to Ray (or use the one already started in this process); returns how many jobs to read at once."""
    import ray
    if not ray.is_initialized():
        kwargs = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
        if address == "local":
            ray.init(num_cpus=workers or None, **kwargs)
        else:
            ray.init(address=address, **kwargs)
    from ray.data import DataContext
    ctx = DataContext.get_current()
    ctx.enable_progress_bars = False   # triage prints its own line (jobs done / total, rate, ETA)
    ctx.max_errored_blocks = -1        # a task Ray gave up on after its retries: its jobs become failed rows
    logging.getLogger("ray.data").setLevel(logging.ERROR)   # (its notes on progress bars and deprecations)
    cpus = int(ray.cluster_resources().get("CPU", 1))
    return max(1, min(workers, cpus) if workers else cpus)


_SPECS: dict[str, Spec] = {}   # per worker process: the spec (and engine) of the run it serves, fetched once


def _task(row: dict, spec: list, token: str) -> dict:
    """One Ray Data row: one job. The spec arrives as an object reference inside a list (so Ray does not resolve
    it for every task) and is fetched once per worker process."""
    s = _SPECS.get(token)
    if s is None:
        import ray
        _SPECS.clear()
        s = _SPECS[token] = ray.get(spec[0])
    return read_job(row, s)


def on_ray(jobs: Iterable[Job], spec: Spec, address: str, workers: int) -> Iterator[dict]:
    """Each job read by a Ray Data task; rows stream back as tasks finish. A task that fails past Ray's own retries
    (a worker lost with its node) leaves its jobs as failed rows; the run goes on."""
    import ray
    from ray.data import TaskPoolStrategy
    width = start_ray(address, workers)
    ref, token = ray.put(spec), uuid.uuid4().hex
    for window in windows(jobs, max(WINDOW_MIN, 32 * width)):
        blocks = min(len(window), max(4 * width, -(-len(window) // BLOCK_JOBS)))
        ds = ray.data.from_items([j.item() for j in window], override_num_blocks=blocks)
        ds = ds.map(_task, fn_kwargs={"spec": [ref], "token": token}, num_cpus=1,
                    compute=TaskPoolStrategy(size=width))
        pending = {(j.source, j.job): j for j in window}
        try:
            for row in ds.iter_rows():
                pending.pop((row["source"], row["job"]), None)
                yield dict(row)
        except Exception as e:   # the window's execution itself failed: its unfinished jobs fail, not the run
            why = f"Ray: {type(e).__name__}: {str(e)[:200]}"
        else:
            why = "Ray gave up on its task after retries"
        for job in pending.values():
            yield lost(job, why)


_SPEC: Spec | None = None   # per local worker process


def _start(spec: Spec) -> None:
    global _SPEC
    _SPEC = spec


def _local(item: dict) -> dict:
    return read_job(item, _SPEC)


def on_processes(jobs: Iterable[Job], spec: Spec, n: int) -> Iterator[dict]:
    """--jobs N: the same reads in N worker processes on this machine (N = 1: in this process)."""
    if n <= 1:
        for job in jobs:
            yield read_job(job.item(), spec)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    pool = ProcessPoolExecutor(n, mp_context=ctx, initializer=_start, initargs=(spec,))
    try:
        for window in windows(jobs, 16 * n):
            futures = {pool.submit(_local, j.item()): j for j in window}
            for f in as_completed(futures):
                try:
                    yield f.result()
                except BrokenProcessPool:   # a worker was killed (the OOM killer): its jobs fail, a new pool goes on
                    yield lost(futures[f], "the worker process reading it died")
                except Exception as e:   # (read_job itself never raises: a row that could not come back)
                    yield lost(futures[f], f"{type(e).__name__}: {str(e)[:200]}")
            if any(isinstance(f.exception(), BrokenProcessPool) for f in futures if not f.cancelled()):
                pool.shutdown(wait=False, cancel_futures=True)
                pool = ProcessPoolExecutor(n, mp_context=ctx, initializer=_start, initargs=(spec,))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
