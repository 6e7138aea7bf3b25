"""`make bench`: time triage against grep on the same files, check the injected failures, measure memory,
start-up and Slack latency, print every target with met / not met, and write BENCHMARKS.md.

    python bench/run.py [--nccl-mb 1024] [--train-mb 200] [--keep DIR]"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench.timing import (HF_LOSS, MEGATRON_LOSS, RUNS, TRIAGE, best_of, errors, errors_and_loss,  # noqa: E402
                          loss_series, timed)


def gen(kind: str, path: Path, mb: int) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "testkit" / "gen_logs.py"), kind, str(path), "--mb", str(mb)],
                         capture_output=True, check=True).stdout
    return json.loads(out)


def check_found(doc: dict, info: dict) -> bool:
    first = {f["symptom"]: f["facts"].get("line") if f["symptom"] == "loss_spike" else f["evidence"][0]["line"]
             for f in doc["findings"]}
    ok = all(first.get(k) == v for k, v in info["injected"].items())
    if "lagging_rank" in info:
        t = next((f for f in doc["findings"] if f["symptom"] == "nccl_timeout"), None)
        ok = ok and t is not None and t["facts"].get("lagging_ranks") == [info["lagging_rank"]]
    return ok


def slack_latency(n: int = 40) -> tuple[float, float]:
    from bot.slack.server import make_server
    from bot.service import Triage
    from bot.settings import Settings
    from bot.slack.app import create_app
    from bot.store.store import Store
    from testkit.fakeslack import FakeSlack, post_signed, slash_body
    from engine import Engine
    from knowledge.runbook import load as load_runbook
    from playbooks.engine import load

    fake = FakeSlack().start()
    tmp = tempfile.mkdtemp()
    settings = Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-bench", "SLACK_SIGNING_SECRET": "s",
                                  "SLACK_API_BASE_URL": fake.api, "TRIAGE_DB": f"{tmp}/b.db",
                                  "TRIAGE_RATE_LIMIT": "1000/60"})
    app = create_app(settings, Triage(Engine(load()), load_runbook(), Store(settings.db)))
    server = make_server(app, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()  # fast shutdown
    url = f"http://127.0.0.1:{server.server_address[1]}/slack/events"
    paste = (ROOT / "tests" / "fixtures" / "nccl_timeout" / "lagging_rank.log").read_text().splitlines()
    text = "\n".join((paste * 30)[:200])
    acks, answers = [], []
    try:
        for i in range(n):
            before = len(fake.responses)
            t0 = time.perf_counter()
            status, _, took = post_signed(url, "s", slash_body(text, fake.response_url(i)),
                                          "application/x-www-form-urlencoded")
            assert status == 200
            fake.wait(lambda: len(fake.responses) > before, timeout=30)
            answers.append(time.perf_counter() - t0)
            acks.append(took)
    finally:
        server.shutdown()
        fake.stop()
    p95 = lambda xs: statistics.quantiles(xs, n=20)[-1] * 1000  # noqa: E731
    return p95(acks), p95(answers)


def _diagnose_with(var: str, value: str, path: Path) -> tuple[float, int, bytes]:
    """One `triage diagnose --json` run with an environment variable set for it (children inherit os.environ)."""
    os.environ[var] = value
    try:
        return best_of(RUNS, [*TRIAGE, "diagnose", "--json", str(path)])
    finally:
        del os.environ[var]


def _backends_and_hf(work: Path, log: Path, mb: int, literals: Path, backend: str, target) -> None:
    """The other scanner backends against the default one on a mixed log; a tqdm-heavy HF Trainer + DeepSpeed log
    against the shell pipeline that gives the same answers."""
    fast, _, _ = best_of(RUNS, [*TRIAGE, "diagnose", "--json", str(log)])
    import importlib.util
    for other, label in (("ahocorasick", "pyahocorasick scanner (where no Hyperscan wheel exists)"), ("re", "pure-Python scanner")):
        if other != "re" and importlib.util.find_spec(other) is None:
            continue   # not installed here
        slow, _, _ = _diagnose_with("TRIAGE_SCAN_BACKEND", other, log)
        target(f"mixed log {mb} MiB, {label} / {backend}", f"{slow / fast:.2f}x ({slow:.2f} s vs {fast:.2f} s)",
               "<= 3x", slow <= 3 * fast)

    log = work / f"hf-{mb}mb.log"
    info = gen("hf", log, mb)
    tri, rss, out = best_of(RUNS, [*TRIAGE, "diagnose", "--json", str(log)])
    base = errors_and_loss(literals, f"'{log}'", HF_LOSS)
    target(f"HF Trainer + DeepSpeed log {mb} MiB (tqdm carriage-return redraws, a loss dict every 10 steps), "
           "triage / (grep -F 25 literals + grep -oE loss)", f"{tri / base:.2f}x ({tri:.2f} s vs "
           f"{base:.2f} s), RSS {rss} MiB", "<= 3x, <= 200 MiB", tri <= 3 * base and rss <= 200)
    target("HF log: loss spike found at its line", str(check_found(json.loads(out), info)), "True",
           check_found(json.loads(out), info))


def _gzip_and_together(work: Path, log: Path, info: dict, mb: int, literals: Path, target) -> None:
    """The mixed log gzipped, and split into 16 per-node files (by rank, as Slurm's per-node output leaves them) read
    with --together, each against the shell pipeline that gives the same answers (errors and loss series) through
    `zcat` or `cat`."""
    import gzip
    gz = log.with_name(log.name + ".gz")
    with open(log, "rb") as src, gzip.open(gz, "wb", compresslevel=6) as dst:
        while block := src.read(8 << 20):
            dst.write(block)
    tri, rss, out = best_of(RUNS, [*TRIAGE, "diagnose", "--json", str(gz)])
    base = errors_and_loss(literals, f"'{gz}'", MEGATRON_LOSS, reader="zcat")
    target(f"mixed log {mb} MiB gzipped ({gz.stat().st_size >> 20} MiB), triage / (zcat | grep -F 25 literals + "
           "zcat | grep -oE loss)",
           f"{tri / base:.2f}x ({tri:.2f} s vs {base:.2f} s), RSS {rss} MiB, found: {check_found(json.loads(out), info)}",
           "<= 3x", tri <= 3 * base and check_found(json.loads(out), info))
    nodes = work / "nodes"
    nodes.mkdir(exist_ok=True)
    files = [open(nodes / f"node-{n:02d}.out", "wb") for n in range(16)]
    with open(log, "rb") as src:
        for line in src:   # "[rank<N>]:" — 512 ranks, 32 a node
            end = line.find(b"]")
            files[int(line[5:end]) // 32 if line.startswith(b"[rank") and end > 5 else 0].write(line)
    for f in files:
        f.close()
    tri, rss, _ = best_of(RUNS, [*TRIAGE, "diagnose", "--json", "--together", str(nodes)])
    base = errors_and_loss(literals, f"'{nodes}'/*.out", MEGATRON_LOSS, reader="cat")
    target("the same log as 16 per-node files, triage --together / (cat | grep -F 25 literals + cat | grep -oE loss)",
           f"{tri / base:.2f}x ({tri:.2f} s "
           f"vs {base:.2f} s), RSS {rss} MiB", "<= 3x", tri <= 3 * base)


def _nccl(a, work: Path, literals: Path, target) -> None:
    """The NCCL log, small and big: time against grep -F, peak RSS and its growth, the failures found."""
    results = {}
    for label, mb in (("small", a.small_mb), ("big", a.nccl_mb)):
        log = work / f"nccl-{mb}mb.log"
        info = gen("nccl", log, mb)
        tri, rss, out = best_of(RUNS, [*TRIAGE, "diagnose", "--json", str(log)])
        grep = errors(literals, f"'{log}'")
        results[label] = (mb, tri, grep, rss, check_found(json.loads(out), info))
        print(f"nccl {mb} MiB: triage {tri:.2f} s, grep -F {grep:.2f} s, peak RSS {rss} MiB, "
              f"found: {results[label][4]}", flush=True)
    mb, tri, grep, rss, ok = results["big"]
    target(f"NCCL log {mb} MiB, triage / grep -F (25 literals a person types)",
           f"{tri / grep:.2f}x ({tri:.2f} s vs {grep:.2f} s)", "<= 1.0x", tri <= grep)
    target("NCCL log peak RSS", f"{rss} MiB", "<= 200 MiB", rss <= 200)
    small_rss = results["small"][3]
    target(f"RSS flat from {a.small_mb} MiB to {a.nccl_mb} MiB", f"{small_rss} -> {rss} MiB", "growth <= 25%",
           rss <= small_rss * 1.25)
    target("injected failures found at their lines (MR error, lagging rank, Xid)", str(ok and results["small"][4]),
           "True", ok and results["small"][4])


def _megatron(a, work: Path, target) -> None:
    """A Megatron training log: time against grep -oE of the loss series, the loss spike found."""
    log = work / f"megatron-{a.train_mb}mb.log"
    info = gen("megatron", log, a.train_mb)
    tri, rss, out = best_of(RUNS, [*TRIAGE, "diagnose", "--json", str(log)])
    grep = loss_series(f"'{log}'", MEGATRON_LOSS)
    target(f"Megatron log {a.train_mb} MiB, triage / grep -oE", f"{tri / grep:.2f}x ({tri:.2f} s vs {grep:.2f} s)",
           "<= 2.0x", tri <= 2 * grep)
    target("loss spike found at its line", str(check_found(json.loads(out), info)), "True",
           check_found(json.loads(out), info))


def _mixed_row(a, work: Path, literals: Path, target, kind: str, layout: str):
    """One mixed layout against the grep pair a person would run: (log, what it holds, time, RSS, JSON)."""
    log = work / f"{kind}-{a.mixed_mb}mb.log"
    info = gen(kind, log, a.mixed_mb)
    tri, rss, out = best_of(RUNS, [*TRIAGE, "diagnose", "--json", str(log)])
    base = errors_and_loss(literals, f"'{log}'", MEGATRON_LOSS)
    found = check_found(json.loads(out), info)
    target(f"mixed 512-rank log {a.mixed_mb} MiB, {layout}, triage / (grep -F 25 literals + grep -oE loss)",
           f"{tri / base:.2f}x ({tri:.2f} s vs {base:.2f} s), RSS {rss} MiB", "<= 1.0x, <= 200 MiB",
           tri <= base and rss <= 200)
    target(f"mixed log, {layout}: OOM and loss spike found at their lines", str(found), "True", found)
    return log, tri, rss, out


def _mixed(a, work: Path, literals: Path, target) -> None:
    """The mixed 512-rank log: time, readers shared over processes, and over the size cap."""
    log, tri, rss, out = _mixed_row(a, work, literals, target, "mixed",
                                    "[rankN]: prefixes, NCCL set-up then iterations")
    one, one_rss, one_out = best_of(RUNS, [*TRIAGE, "diagnose", "--json", "--jobs", "1", str(log)])
    same = json.loads(one_out) == json.loads(out)
    target(f"mixed log {a.mixed_mb} MiB, readers shared over up to {os.cpu_count()} processes (the default) / one "
           f"process (--jobs 1); RSS is the largest process's", f"{tri / one:.2f}x ({tri:.2f} s vs {one:.2f} s), "
           f"RSS {rss} vs {one_rss} MiB, same answer: {same}", "< 1.0x, same answer", tri < one and same)
    tri, rss, out = _diagnose_with("TRIAGE_MAX_BYTES", str(a.mixed_mb << 19), log)   # half: its head and tail are read
    target(f"the same log over the size cap (TRIAGE_MAX_BYTES = {a.mixed_mb // 2} MiB: head and tail read), peak RSS",
           f"{rss} MiB ({tri:.2f} s, truncated: {json.loads(out)['input']['truncated']})", "<= 200 MiB", rss <= 200)


def _mixed_pg(a, work: Path, literals: Path, target) -> None:
    """Issue 33's second layout: new process groups' NCCL set-up all through the run, every rank's iterations."""
    log, *_ = _mixed_row(a, work, literals, target, "mixed-pg",
                         "second layout (new process groups' NCCL set-up all through the run)")
    log.unlink()


def _startup(work: Path, target, notes: list[str]) -> None:
    """The CLI on a 50-line paste against a bare interpreter importing the same libraries, warm and cold."""
    paste = b"".join((ROOT / "tests" / "fixtures" / "cuda_oom" / "new_format_fragmented.log").read_bytes()
                     .splitlines(keepends=True) * 3)[:50 * 200]
    os.environ["TRIAGE_CACHE_DIR"] = str(work / "cache")   # children inherit it: the first run starts cold
    cold, _, _ = timed([*TRIAGE, "diagnose", "-"], stdin=paste)
    cli, _, _ = best_of(5, [*TRIAGE, "diagnose", "-"], stdin=paste)
    base, _, _ = best_of(5, [sys.executable, "-c", "import regex, pydantic, yaml"])
    import importlib.util
    if Path(importlib.util.cache_from_source(str(ROOT / "bot" / "cli" / "entry.py"))).exists():
        bytecode = "project bytecode precompiled by make"
    else:
        bytecode = "compiled from source every run" if sys.flags.dont_write_bytecode else "bytecode cached"
    target(f"CLI on a 50-line paste / python -c 'import regex, pydantic, yaml' (playbook cache warm; {bytecode})",
           f"{cli / base:.2f}x ({cli * 1000:.0f} ms vs {base * 1000:.0f} ms)", "<= 2.0x", cli <= 2 * base)
    print(f"         first run with an empty playbook cache (validates the YAML with pydantic): {cold * 1000:.0f} ms",
          flush=True)
    notes.append(f"The first `triage diagnose` after a playbook changes validates the YAML with pydantic and "
                 f"fills `TRIAGE_CACHE_DIR`: {cold * 1000:.0f} ms for the same paste ({cold / base:.2f}x).")


def _write_markdown(rows, notes: list[str], backend: str) -> None:
    """BENCHMARKS.md: the machine, then one row per target."""
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else "?"
    md = ["# Benchmarks", "", f"Machine: {os.cpu_count()} cores ({cpu}), "
          f"{os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') >> 30} GiB RAM, Python {platform.python_version()}, "
          f"scanner backend: {backend}. Produced by `make bench` ({time.strftime('%Y-%m-%d')}); each time is the best "
          f"of {RUNS} runs, triage's and its baselines' alike; every grep baseline runs with LC_ALL=C (the fast one).", "",
          "| target | measured | goal | |", "|---|---|---|---|"]
    md += [f"| {n} | {m} | {g} | {'met' if ok else '**not met**'} |" for n, m, g, ok in rows]
    md += ["", *notes] if notes else []
    (ROOT / "BENCHMARKS.md").write_text("\n".join(md) + "\n")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nccl-mb", type=int, default=1024)
    ap.add_argument("--small-mb", type=int, default=100)
    ap.add_argument("--train-mb", type=int, default=200)
    ap.add_argument("--mixed-mb", type=int, default=1024)
    ap.add_argument("--keep", help="directory for the generated logs (default: a temporary one)")
    a = ap.parse_args(argv)
    work = Path(a.keep or tempfile.mkdtemp(prefix="triage-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    from bench.families import PERSON
    literals = work / "person-literals.txt"   # what a person greps for, not the parsers' trigger list
    literals.write_text("\n".join(PERSON) + "\n")
    try:
        from parsers.scan.scanner import make_backend
        backend = make_backend([b"x"]).name
    except Exception:
        backend = "?"
    rows: list[tuple[str, str, str, bool]] = []
    notes: list[str] = []

    def target(name, measured, goal, ok):
        rows.append((name, measured, goal, ok))
        print(f"{'MET    ' if ok else 'NOT MET'}  {name}: {measured} (target {goal})", flush=True)

    _nccl(a, work, literals, target)
    _megatron(a, work, target)
    _mixed(a, work, literals, target)
    _mixed_pg(a, work, literals, target)
    log = work / f"mixed-{a.train_mb}mb.log"   # a smaller mixed log for the backends, gzip and --together
    info = gen("mixed", log, a.train_mb)
    _backends_and_hf(work, log, a.train_mb, literals, backend, target)
    _gzip_and_together(work, log, info, a.train_mb, literals, target)
    _startup(work, target, notes)

    from bench.families import run as families
    families(work, 50, target)   # each line family alone against the grep a person would run

    ack, answer = slack_latency()
    target("Slack HTTP ack p95", f"{ack:.0f} ms", "<= 100 ms", ack <= 100)
    target("Slack answer p95, 200-line paste, no LLM", f"{answer:.0f} ms", "<= 300 ms", answer <= 300)
    _write_markdown(rows, notes, backend)
    from bench.fleet import main as fleet
    fleet(["--keep", str(work / "fleet")])   # triage fleet on Ray (1, 2 workers) vs --jobs: its own section
    print(f"\n{sum(r[3] for r in rows)} of {len(rows)} targets met; figures written to BENCHMARKS.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
