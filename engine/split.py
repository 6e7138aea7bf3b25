"""One big log read by several processes at once, each feeding a share of the readers (`triage diagnose --jobs`).

Every process reads the whole log, so every reader sees exactly the lines, line numbers and neighbours it sees
when one process reads alone: the answer is the same, whatever the shares. The first chunk is read by one process
that measures what each reader costs; the readers are then shared out (the costliest first, each to the least
loaded share) into as many shares as shorten the longest one, the workers are forked, carry on from the same chunk
and send their readers back at the end. The readers of a worker that is lost are reported as failed, as a reader
that raises is. POSIX with /proc (Linux): elsewhere one process reads."""
from __future__ import annotations

import fcntl
import io
import os
import pickle
import signal
import stat
import sys
from dataclasses import dataclass
from typing import Callable

GAIN = 0.85   # another share must cut the expected time by at least 15% (each process also pays for the reading)


def available() -> bool:
    return hasattr(os, "fork") and os.path.isdir("/proc/self/fd")


def rereadable(stream) -> bool:
    """Whether a worker can read on from this stream by itself: memory or a regular file (not a pipe or a socket,
    whose bytes would go to whichever process reads first). None: the source opens its files itself (Joined)."""
    if stream is None or isinstance(stream, io.BytesIO):
        return True
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        return False


def partition(cost: list[float], base: float, jobs: int) -> list[list[int]]:
    """Reader indices in shares (the most loaded first): the costliest reader first, each to the least loaded share
    (ties: the one with fewest readers). A share more only where the expected time — `base` (reading, matching: paid
    by every process) plus the most loaded share — falls by GAIN or more from the best with fewer."""
    order = sorted(range(len(cost)), key=lambda i: -cost[i])
    best, best_time = [order], base + sum(cost)
    for n in range(2, min(jobs, len(cost)) + 1):
        shares: list[list[int]] = [[] for _ in range(n)]
        load = [0.0] * n
        for i in order:
            k = min(range(n), key=lambda s: (load[s], len(shares[s])))
            shares[k].append(i)
            load[k] += cost[i]
        time = base + max(load)
        if time <= GAIN * best_time:
            best, best_time = sorted(shares, key=lambda s: -sum(cost[i] for i in s)), time
    return best


def _reading() -> dict[int, int]:
    """In the parent, just before forking: each file open for reading, and its offset."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY and os.path.isfile(f"/proc/self/fd/{fd}"):
                out[fd] = os.lseek(fd, 0, os.SEEK_CUR)
        except OSError:
            continue
    return out


def _detach(files: dict[int, int]) -> None:
    """In a forked worker: give each file open for reading its own offset, where it was at the fork (parent and
    child share one after fork, and the parent reads on at once), so that neither moves the other's reading."""
    for fd, pos in files.items():
        try:
            new = os.open(f"/proc/self/fd/{fd}", os.O_RDONLY)
        except OSError:
            continue
        os.lseek(new, pos, os.SEEK_SET)
        os.dup2(new, fd)
        os.close(new)


def _die_with(parent: int) -> None:
    """A worker ends when its parent does (killed, or stopped by a timeout's SIGTERM before it could reap its
    workers): it would otherwise read the rest of a big log for nobody."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG (Linux)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:   # the parent was gone before that took effect
        os._exit(1)


@dataclass
class Worker:
    pid: int
    fd: int
    share: list[int]
    done: bool = False


def start(shares: list[list[int]], work: Callable[[list[int]], bytes]) -> list[Worker]:
    """Fork one worker for each share: it runs `work(share)` (which reads on and returns its pickled answer),
    writes the answer to its pipe and exits without running the parent's exit handlers or flushing its buffers."""
    sys.stdout.flush()
    sys.stderr.flush()
    files, parent = _reading(), os.getpid()
    workers = []
    for share in shares:
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:   # the worker
            code = 1
            try:
                os.close(r)
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                _die_with(parent)
                _detach(files)
                try:
                    answer = work(share)
                except BaseException as e:   # sent back, so the parent can say which readers were lost and why
                    answer = pickle.dumps(("error", f"{type(e).__name__}: {e}"[:200]))
                with os.fdopen(w, "wb") as out:
                    out.write(answer)
                code = 0
            finally:
                os._exit(code)
        os.close(w)
        workers.append(Worker(pid, r, share))
    return workers


def answer(states: dict[int, object], failed: dict[str, str]) -> bytes:
    """What a worker sends back: each reader pickled on its own (by index; one that cannot be is named as failed,
    the others still arrive) and the names of the readers that failed."""
    sent, failed = {}, dict(failed)
    for i, reader in states.items():
        try:
            sent[i] = pickle.dumps(reader, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            name = getattr(reader, "name", f"reader {i}")
            failed[name] = f"cannot be sent back from its worker process ({type(e).__name__}: {e})"[:200]
    return pickle.dumps(("ok", sent, failed), protocol=pickle.HIGHEST_PROTOCOL)


def finish(workers: list[Worker], readers: list, failed: dict[str, str]) -> None:
    """Wait for every worker; put its readers in place of the parent's idle copies, or mark its share failed."""
    for w in workers:
        with os.fdopen(w.fd, "rb") as f:
            data = f.read()
        os.waitpid(w.pid, 0)
        w.done = True
        try:
            kind, *rest = pickle.loads(data)
        except Exception:
            kind, rest = "error", ["its worker process ended without an answer"]
        if kind == "ok":
            sent, lost = rest
            for i, blob in sent.items():
                readers[i] = pickle.loads(blob)
            failed.update(lost)
            continue
        for i in w.share:
            failed[readers[i].name] = f"worker process: {rest[0]}"


def stop(workers: list[Worker]) -> None:
    """The parent gave up (an error, Ctrl-C): end the workers and reap them."""
    for w in (w for w in workers if not w.done):
        w.done = True
        try:
            os.kill(w.pid, signal.SIGKILL)
            os.waitpid(w.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        try:
            os.close(w.fd)
        except OSError:
            pass
