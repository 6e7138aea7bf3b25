"""Timing one child process: wall seconds, peak RSS and its stdout (used by bench/run.py and bench/families.py)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRIAGE = [sys.executable, "-m", "bot.cli"]
# Timings are the best of several runs, triage's as its baselines' (this VM's speed varies by up to 40% between runs):
# a single triage run against the best of three greps made ratios move by a third between two `make bench` runs, and
# with the best of two the Megatron row still read 1.9x in one run and 2.9x in the next (same code; 4.8-5.5 s when
# timed by hand in between).
RUNS = 3


def timed(cmd: list[str], stdin: bytes | None = None) -> tuple[float, int, bytes]:
    """Wall seconds, peak RSS (MiB) and stdout of one child process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=ROOT, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out_chunks: list[bytes] = []
    reader = threading.Thread(target=lambda: out_chunks.append(p.stdout.read()))
    reader.start()
    if stdin is not None:
        p.stdin.write(stdin)
        p.stdin.close()
    _, status, ru = os.wait4(p.pid, 0)
    reader.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    return time.perf_counter() - t0, ru.ru_maxrss // 1024, b"".join(out_chunks)


def best_of(n: int, cmd: list[str], stdin: bytes | None = None) -> tuple[float, int, bytes]:
    runs = [timed(cmd, stdin) for _ in range(n)]
    return min(r[0] for r in runs), max(r[1] for r in runs), runs[-1][2]


MEGATRON_LOSS = "lm loss: [0-9.E+-]+"
HF_LOSS = "'loss': [0-9.e-]+"


def errors(literals: Path, files: str, reader: str = "") -> float:
    """`LC_ALL=C grep -c -F` with the literals a person types, in seconds (best of RUNS). `files`: quoted shell words;
    `reader`: a command the files go through first (`zcat`, `cat`). Every grep baseline runs in the C locale: under
    this machine's C.UTF-8, grep -F takes ~1.5x and grep -oE ~4x as long, which would flatter triage."""
    feed, src = (f"{reader} {files} | ", "") if reader else ("", f" {files}")
    return best_of(RUNS, ["sh", "-c", f"{feed}LC_ALL=C grep -c -F -f '{literals}'{src}"])[0]


def loss_series(files: str, loss: str, reader: str = "") -> float:
    """`LC_ALL=C grep -oE` for the loss series, in seconds (best of RUNS), into a pipe: GNU grep writing to /dev/null
    stops at its first match."""
    feed, src = (f"{reader} {files} | ", "") if reader else ("", f" {files}")
    return best_of(RUNS, ["sh", "-c", f"{feed}LC_ALL=C grep -oE \"{loss}\"{src} | wc -l"])[0]


def errors_and_loss(literals: Path, files: str, loss: str, reader: str = "") -> float:
    """The shell pipeline that gives the answers triage gives: the errors plus the loss series."""
    return errors(literals, files, reader) + loss_series(files, loss, reader)
