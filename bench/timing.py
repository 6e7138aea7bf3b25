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


def errors_and_loss(literals: Path, files: str, loss: str, reader: str = "") -> float:
    """The shell pipeline that gives the answers triage gives, in seconds (each half the best of RUNS): `grep -F`
    with the literals a person types, for the errors, plus `LC_ALL=C grep -oE` for the loss series. `files`: quoted
    shell words; `reader`: a command the files go through first (`zcat`, `cat`). The series goes into a pipe: GNU grep
    writing to /dev/null stops at its first match."""
    feed = f"{reader} {files} | " if reader else ""
    src = "" if reader else f" {files}"
    grep, _, _ = best_of(RUNS, ["sh", "-c", f"{feed}grep -c -F -f '{literals}'{src}"])
    series, _, _ = best_of(RUNS, ["sh", "-c", f"{feed}LC_ALL=C grep -oE \"{loss}\"{src} | wc -l"])
    return grep + series
