"""`triage fleet` throughput: jobs/s and GB/s on Ray with 1 and 2 workers against --jobs 1 and 2 (this machine's
processes, no Ray) on the same files, and the driver's store writes per second (--record). Writes its paragraph
into BENCHMARKS.md (a section of its own, kept when `make bench` rewrites the rest).

    python bench/fleet.py [--small 400] [--big 24] [--big-mb 8] [--keep DIR]

Two job sets: many small jobs (fixture logs, one or two files each: what scheduling costs per job) and fewer big
ones (two generated multi-MiB training logs each: what reading costs per byte). Every run is a fresh `triage fleet`
process; Ray's start-up (a local Ray in that process) is measured on an empty folder and reported apart."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
TRIAGE = [sys.executable, "-m", "bot.cli"]
sys.path.insert(0, str(ROOT))
from bot.fleet.run import BLOCK_JOBS  # noqa: E402
LOAD = os.getloadavg()[0]
HEAD = "## Triage a fleet (`triage fleet`, `python bench/fleet.py`)"


def small_jobs(root: Path, n: int) -> None:
    sick = sorted(p for p in FIXTURES.rglob("*.log") if p.with_suffix(".expected.json").exists())
    healthy = sorted((FIXTURES / "healthy").glob("*.log"))
    for i in range(n):
        job = root / f"job-{i:04d}"
        job.mkdir(parents=True)
        shutil.copy(sick[i % len(sick)] if i % 3 else healthy[i % len(healthy)], job / "rank0.log")
        if i % 2:
            shutil.copy(healthy[(i // 2) % len(healthy)], job / "rank1.log")


def big_jobs(root: Path, n: int, mb: int) -> None:
    seeds = root.parent / "seeds"
    seeds.mkdir(exist_ok=True)
    made = []
    for kind in ("mixed", "megatron", "hf"):
        out = seeds / f"{kind}.log"
        subprocess.run([sys.executable, str(ROOT / "testkit" / "gen_logs.py"), kind, str(out), "--mb", str(mb)],
                       check=True, capture_output=True)
        made.append(out)
    for i in range(n):
        job = root / f"big-{i:03d}"
        job.mkdir(parents=True)
        for r in range(2):   # hard links: the same bytes on disk, read as different files
            os.link(made[(i + r) % len(made)], job / f"node{r}.log")


def run(args: list[str], env: dict[str, str], runs: int = 2) -> tuple[float, str]:
    """The best wall time of `runs` runs (a pause after each: a local Ray's processes take a moment to go)."""
    best, text = float("inf"), ""
    for _ in range(runs):
        t0 = time.perf_counter()
        r = subprocess.run([*TRIAGE, "fleet", *args], capture_output=True, text=True, env=env, cwd=ROOT)
        took = time.perf_counter() - t0
        if r.returncode not in (0, 1):
            raise SystemExit(f"triage fleet {' '.join(args)} failed: {r.stderr[-2000:]}")
        best, text = min(best, took), r.stdout + r.stderr
        time.sleep(3)
    return best, text


def measure(src: Path, out: Path, env: dict[str, str], start: dict[str, float]) -> dict[str, tuple]:
    """Per executor: (wall s, wall less start-up s, jobs, bytes)."""
    res = {}
    for label, args in (("--jobs 1", ["--jobs", "1"]), ("--jobs 2", ["--jobs", "2"]),
                        ("Ray, 1 worker", ["--ray", "local", "--workers", "1"]),
                        ("Ray, 2 workers", ["--ray", "local", "--workers", "2"])):
        took, text = run([str(src), *args, "--out", str(out)], env)
        rows = [json.loads(line) for line in out.read_text().splitlines()]
        total = sum(r.get("input", {}).get("bytes", 0) for r in rows)
        res[label] = (took, took - start["ray" if "Ray" in label else "local"], len(rows), total)
        print(f"  {src.name} {label}: {took:.2f} s ({res[label][1]:.2f} s less start-up), {len(rows)} jobs, "
              f"{total / 1e9:.3f} GB", flush=True)
    return res


def record_rate(src: Path, env: dict[str, str], work: Path) -> float:
    """Driver-side store writes per second: the small set recorded, less the same run unrecorded."""
    db = work / "bench.db"
    for stale in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        stale.unlink(missing_ok=True)
    env = {**env, "TRIAGE_DB": str(db)}
    plain, _ = run([str(src), "--jobs", "2", "--out", os.devnull], env, 1)
    rec, text = run([str(src), "--jobs", "2", "--record", "--out", os.devnull], env, 1)
    n = int(re.search(r"(\d+) job\(s\) read", text).group(1))
    return n / max(rec - plain, 1e-3)


def paragraph(res: dict[str, dict], start: dict[str, float], writes: float) -> str:
    lines = [HEAD, "", f"Machine: {os.cpu_count()} cores (load average {LOAD:.1f} when the run began: other work on the "
             "machine makes these figures noisy). Best wall time of two whole `triage fleet` runs; in brackets the "
             f"same less the start-up measured on an empty folder (Python and the engine: {start['local']:.1f} s; "
             f"with a local Ray started in the process: {start['ray']:.1f} s).", "",
             "| job set | executor | jobs | GB | wall | jobs/s | GB/s |", "|---|---|---:|---:|---:|---:|---:|"]
    for name, per in res.items():
        for label, (took, net, jobs, total) in per.items():
            net = max(net, 1e-3)
            lines.append(f"| {name} | {label} | {jobs} | {total / 1e9:.2f} | {took:.1f} s ({net:.1f} s) | "
                         f"{jobs / net:.1f} | {total / 1e9 / net:.3f} |")
    lines += ["", f"Driver-side store writes (`--record`, one SQLite writer): {writes:.0f} jobs/s.", ""]
    return "\n".join(lines + scaling(res, writes)) + "\n"


def scaling(res: dict[str, dict], writes: float) -> list[str]:
    """How it scales, from the figures above: per-worker throughput × workers, the store as the ceiling."""
    small, big = res.values()   # the small jobs' set first, then the big ones'
    _, net, jobs, total = big["Ray, 1 worker"]
    per_job = total / max(jobs, 1)
    gbs = total / 1e9 / max(net, 1e-3)
    sj, driver = small["Ray, 1 worker"], small["--jobs 2"]
    jps, rows = sj[2] / max(sj[1], 1e-3), driver[2] / max(driver[1], 1e-3)
    workers = 100 * 8
    return [f"How it scales. One Ray task reads up to {BLOCK_JOBS} jobs (a job's files are read in that task, in one pass, "
            "never split across tasks), so a task carries what its jobs hold: a few KiB for a small job, tens of "
            "MiB for a big one; the engine is sent to each worker process once. Nothing but the rows (a few KiB of "
            "JSON per job) comes back to the driver, which is the only writer of the store. On this 2-core machine "
            "Ray's own processes (GCS, raylet, the driver) share the cores with the workers, so 2 workers gain "
            "little over 1, and the local pool (`--jobs`) wins on small jobs: per job Ray costs a few ms of "
            "scheduling more. Where it pays is many machines: a 100-node cluster with 8 workers a node would read "
            f"about {gbs * workers:.0f} GB/s and {jps * workers:,.0f} small jobs/s at this machine's per-worker "
            f"figures ({gbs:.3f} GB/s, {jps:.0f} small jobs/s per worker) — but every row passes through the "
            f"driver (at least {rows:.0f} rows/s here: the small jobs on `--jobs 2`) and recording is capped by "
            f"the single SQLite writer at about {writes:.0f} jobs/s, so with `--record` the store is the ceiling: "
            f"for small jobs at once, and for jobs of {per_job / 2**20:.0f} MiB at about "
            f"{writes * per_job / 1e9:.1f} GB/s, below what those workers read. Past it, shard the store: one `TRIAGE_DB` per cluster or S3 prefix (one `triage fleet --record` "
            "per shard, each with its own report), or run without `--record`, keep the `--out` JSON lines and "
            "load them in bulk later."]


def write_section(text: str) -> None:
    path = ROOT / "BENCHMARKS.md"
    old = path.read_text() if path.exists() else "# Benchmarks\n"
    keep = old.split(HEAD, 1)[0].rstrip("\n")
    rest = old.split(HEAD, 1)[1] if HEAD in old else ""
    tail = ("\n## " + rest.split("\n## ", 1)[1]) if "\n## " in rest else ""
    path.write_text(keep + "\n\n" + text + tail)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", type=int, default=400)
    ap.add_argument("--big", type=int, default=24)
    ap.add_argument("--big-mb", type=int, default=8)
    ap.add_argument("--keep", help="directory for the generated jobs (default: a temporary one)")
    a = ap.parse_args(argv)
    work = Path(a.keep or tempfile.mkdtemp(prefix="triage-fleet-bench-"))
    env = {**os.environ, "TRIAGE_CACHE_DIR": str(work / "cache")}
    small, big, empty = work / "small", work / "big", work / "empty"
    for d in (small, big, empty):
        shutil.rmtree(d, ignore_errors=True)
    empty.mkdir(parents=True)
    small_jobs(small, a.small)
    big_jobs(big, a.big, a.big_mb)
    start = {"local": run([str(empty), "--jobs", "1"], env)[0],
             "ray": run([str(empty), "--ray", "local", "--workers", "2"], env)[0]}
    out = work / "rows.jsonl"
    per = sum(f.stat().st_size for f in big.rglob("*.log")) / a.big / 2**20
    res = {f"{a.small} small jobs (fixture logs)": measure(small, out, env, start),
           f"{a.big} big jobs (2 generated logs, {per:.0f} MiB a job)": measure(big, out, env, start)}
    text = paragraph(res, start, record_rate(small, env, work))
    print(text)
    write_section(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
