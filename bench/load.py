"""Load test: 200 concurrent /diagnose requests and 50 thread mentions against `triage serve`'s HTTP server,
with the fake Slack Web API. Checks every request is acked within 3 s, answered exactly once and stored.

    python bench/load.py [--slash 200] [--mentions 50]"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _start_bot(fake, tmp: str):
    """`triage serve` in HTTP mode against the fake Slack, once its /healthz answers: (process, events URL)."""
    import os
    import socket
    import subprocess
    import urllib.request
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "TRIAGE_"))}
    env.update({"SLACK_BOT_TOKEN": "xoxb-load", "SLACK_SIGNING_SECRET": "load", "SLACK_API_BASE_URL": fake.api,
                "TRIAGE_DB": f"{tmp}/load.db", "TRIAGE_RATE_LIMIT": "1000/60"})
    bot = subprocess.Popen([sys.executable, "-m", "bot.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
                           cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(300):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    return bot, f"http://127.0.0.1:{port}/slack/events"


def _watch_rss(bot) -> list[int]:
    """The bot's peak resident memory in KiB while the burst is served (Linux /proc), kept up to date in a list."""
    import threading
    peak_rss = [0]

    def watch():
        while bot.poll() is None:
            try:
                kb = next(int(ln.split()[1]) for ln in open(f"/proc/{bot.pid}/status") if ln.startswith("VmRSS"))
                peak_rss[0] = max(peak_rss[0], kb)
            except (OSError, StopIteration):
                return
            time.sleep(0.1)
    threading.Thread(target=watch, daemon=True).start()
    return peak_rss


def _burst(a, url: str, fake, texts: list[str], pastes: list[str]):
    """Every slash command and mention at once: (results, seconds to send them all)."""
    from testkit.fakeslack import event_body, post_signed, slash_body

    def slash(i: int):
        body = slash_body(texts[i % len(texts)], fake.response_url(i), user=f"U{i}")
        try:
            status, reply, took = post_signed(url, "load", body, "application/x-www-form-urlencoded")
        except OSError as e:   # refused or reset: counted as a failure, never a crash of the bench
            return "slash", i, f"{type(e).__name__}", 99.0, False
        return "slash", i, status, took, b"Busy" in reply

    def mention(i: int):
        ts = f"{9000 + i}.0001"
        fake.threads[("CL", ts)] = [{"user": f"V{i}", "ts": ts, "text": "<@UBOT>\n" + pastes[i % len(pastes)]}]
        event = {"type": "app_mention", "user": f"V{i}", "text": "<@UBOT> look", "ts": ts, "channel": "CL"}
        try:
            status, _, took = post_signed(url, "load", event_body(event, f"EvLoad{i}"), "application/json")
        except OSError as e:
            return "mention", i, f"{type(e).__name__}", 99.0, False
        return "mention", i, status, took, False

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=a.slash + a.mentions) as pool:
        futures = [pool.submit(slash, i) for i in range(a.slash)] + [pool.submit(mention, i) for i in range(a.mentions)]
        results = [f.result() for f in futures]
    sent = time.perf_counter() - t0
    return results, sent


def _report(a, fake, tmp: str, results, sent: float, t0: float, peak_rss: list[int]) -> dict[str, bool]:
    """Wait for every answer (or two minutes), then count, print and check them."""
    import sqlite3
    acks = [r[3] for r in results]
    bad_status = [r for r in results if r[2] != 200]
    busy_slash = sum(1 for r in results if r[4])   # told "busy, retry in N s" at the ack: no answer follows
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = len(fake.responses)
        mentions_done = len({p.get("thread_ts") for p in fake.called("chat.postMessage")})
        if done >= a.slash - busy_slash and mentions_done >= a.mentions:   # done counts late busy notes too
            break
        time.sleep(0.2)
    took = time.perf_counter() - t0
    time.sleep(1.0)  # let any duplicate arrive before counting
    busy_later = sum(1 for r in fake.responses if "Busy" in (r.get("text") or ""))   # queue filled after the ack
    responses = len(fake.responses) - busy_later
    posts = Counter(p.get("thread_ts") for p in fake.called("chat.postMessage") if p.get("blocks"))
    busy = Counter(p.get("thread_ts") for p in fake.called("chat.postMessage") if "Busy" in (p.get("text") or ""))
    replies = posts + busy
    db = sqlite3.connect(f"{tmp}/load.db")
    stored = db.execute("select count(*) from diagnoses").fetchone()[0]
    p95 = statistics.quantiles(acks, n=20)[-1]
    checks = {
        "every request answered 200": not bad_status,
        "every ack within 3 s": max(acks) <= 3.0,
        f"{a.slash} slash commands answered once or told busy": responses + busy_later == a.slash - busy_slash,
        f"{a.mentions} threads answered once or told busy": len(replies) == a.mentions and max(replies.values(), default=1) == 1,
        "every answer stored, nothing half-done": stored == responses + len(posts),
    }
    print(f"sent {len(results)} requests in {sent:.2f} s; all answered after {took:.2f} s")
    print(f"peak RSS of triage serve: {peak_rss[0] / 1024:.0f} MiB")
    print(f"ack latency: p50 {statistics.median(acks) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
          f"max {max(acks) * 1000:.0f} ms")
    print(f"slash answers {responses}, thread answers {sum(posts.values())} in {len(posts)} threads, stored {stored}; "
          f"told busy: {busy_slash + busy_later} slash, {sum(busy.values())} threads (queue bound, retry time given)")
    if bad_status:
        print("not 200:", Counter((r[0], r[2]) for r in bad_status))
    if stored != responses + len(posts):
        print("stored by source:", dict(db.execute("select source, count(*) from diagnoses group by source")))
    for name, ok in checks.items():
        print(f"{'OK  ' if ok else 'FAIL'} {name}")
    return checks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--slash", type=int, default=200)
    ap.add_argument("--mentions", type=int, default=50)
    ap.add_argument("--paste-kb", type=int, default=0,
                    help="pad the log pasted in each mentioned thread to this many KiB (healthy NCCL INFO lines in front "
                         "of the failure); slash commands carry at most 3,500 characters, as Slack's do")
    a = ap.parse_args(argv)

    from testkit.fakeslack import FakeSlack

    fake = FakeSlack().start()
    tmp = tempfile.mkdtemp(prefix="triage-load-")
    bot, url = _start_bot(fake, tmp)
    logs = sorted((ROOT / "tests" / "fixtures").glob("*/*.log"))
    texts = [p.read_text()[:3500] for p in logs if p.parent.name not in ("healthy", "report")]
    pastes = texts
    if a.paste_kb:
        filler = "node-1:4410:4410 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read\n"
        pastes = [filler * (a.paste_kb * 1024 // len(filler)) + t for t in texts]
    peak_rss = _watch_rss(bot)
    t0 = time.perf_counter()
    results, sent = _burst(a, url, fake, texts, pastes)
    checks = _report(a, fake, tmp, results, sent, t0, peak_rss)
    bot.terminate()
    bot.wait(timeout=30)
    fake.stop()
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
