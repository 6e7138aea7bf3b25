"""Soak (issue 31): N mixed Slack requests against two `triage serve` processes on one database, the fake Slack Web
API injecting faults into the bot's posts, one server killed with SIGKILL while one of its posts is in flight and
replaced by a fresh process on the same database. Ends with every answer posted exactly once, or exit 1.

    python bench/soak.py [--events 1000] [--seed 31] [--fault-rate 0.25] [--retry-rate 0.15]

What is sent (seeded): app_mention events in threads holding a pasted log from tests/fixtures, /diagnose slash
commands with the log as text and their own response_url, and "Diagnose" message shortcuts, spread over both servers.
Events are delivered as Slack does: a delivery that gets no 200 is re-sent (X-Slack-Retry-Num) to a live server, and
a share of acked events is re-sent anyway (Slack retries an ack it thinks was late), sometimes to the other server.
Slash commands and shortcuts are sent once (Slack never re-sends them): one whose ack never came back (in flight to
the killed server) may be answered once or not at all, never twice.

Faults: a share of the bot's chat.postMessage calls (each post at most once, so retries settle in seconds) is
answered 429 with Retry-After, 500 before doing the work, 503 after doing it, or a dropped connection before or after
doing it; a share of response_url answers gets a 503 (the bot then posts to the channel). Midway the next post of
server `a` that Slack has not seen before kills `a` with SIGKILL (the post taken or not, seeded); a replacement starts
on the same database and resumes what `a` left. The soak then waits until every expected answer is in and the
database's journal (`work`) and outbox hold nothing in progress, and counts answers per request: diagnosis blocks
posted in the request's thread (mention, shortcut), or for a /diagnose its response_url answer or a post in its
channel. The seed fixes the mix, the routing and the fault schedule; the interleaving of threads still varies."""
from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import urlencode, urlparse

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from testkit.fakeslack import event_body, post_signed, slash_body  # noqa: E402
from testkit.soakslack import Req, SoakSlack  # noqa: E402

SECRET = "soak-signing-secret"


# ---- the bot: `triage serve` processes on one database ---------------------------------------------------------
class Server:
    def __init__(self, name: str, fake: SoakSlack, db: Path, workdir: Path):
        self.name, self.token = name, f"xoxb-soak-{name}"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "TRIAGE_"))}
        env.update({"SLACK_BOT_TOKEN": self.token, "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_BASE_URL": fake.api,
                    "TRIAGE_DB": str(db), "TRIAGE_RATE_LIMIT": "100000/60"})
        self.log = workdir / f"serve-{name}.log"
        self.proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "serve", "--host", "127.0.0.1",
                                      "--port", str(self.port)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                                     stderr=open(self.log, "w"))
        self.url = f"http://127.0.0.1:{self.port}/slack/events"
        self.ready = False

    def wait_ready(self, timeout: float = 120) -> "Server":
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2):
                    self.ready = True
                    return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"triage serve {self.name} did not start:\n{self.log.read_text()[-2000:]}")
                time.sleep(0.1)

    def alive(self) -> bool:
        return self.ready and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# ---- the requests ----------------------------------------------------------------------------------------------
def pastes() -> list[str]:
    """Fixture logs (their first 3,500 characters, what a slash command carries) in which the engine finds a
    failure: each is answered with exactly one diagnosis."""
    from engine import Engine
    from core.ingest import from_bytes
    from playbooks.engine import load
    eng, out = Engine(load()), []
    for p in sorted((ROOT / "tests" / "fixtures").glob("*/*.log")):
        text = p.read_text(encoding="utf-8", errors="replace")[:3500]
        if p.parent.name not in ("healthy", "report") and eng.diagnose(from_bytes(text.encode(), "paste")).findings:
            out.append(text)
    return out


def build(n: int, seed: int, retry_rate: float, fake: SoakSlack, logs: list[str],
          mix: tuple[float, ...] = (6, 3, 1)) -> list[Req]:
    rng, reqs = random.Random(seed), []
    for i in range(n):
        kind = rng.choices(("mention", "slash", "shortcut"), mix)[0]
        log, user = rng.choice(logs), f"U{rng.randrange(50)}"
        if kind == "slash":
            ch = f"CD{i}"
            url = fake.response_url(i)
            body = slash_body(log, url, channel=ch, user=user)
            req = Req(i, kind, ch, body, "application/x-www-form-urlencoded")
            fake.by_response[urlparse(url).path] = req
            fake.by_channel[ch] = req
        else:
            ch, ts = f"C{i % 7}", f"{1600000000 + i}.000200"
            if kind == "mention":
                fake.threads[(ch, ts)] = [{"user": user, "ts": ts, "text": "<@UBOT>\n" + log}]
                event = {"type": "app_mention", "user": user, "text": "<@UBOT> what broke here?", "ts": ts,
                         "channel": ch, "team": "T1", "event_ts": ts}
                req = Req(i, kind, ch, event_body(event, f"EvSoak{seed}x{i}"), "application/json",
                          dupe=rng.random() < retry_rate)
            else:
                payload = {"type": "message_action", "callback_id": "diagnose_message", "trigger_id": f"{seed}.{i}",
                           "team": {"id": "T1"}, "channel": {"id": ch}, "user": {"id": user}, "action_ts": ts,
                           "message": {"type": "message", "user": user, "ts": ts, "text": log},
                           "response_url": fake.response_url(100000 + i)}
                req = Req(i, kind, ch, urlencode({"payload": json.dumps(payload)}),
                          "application/x-www-form-urlencoded")
            fake.by_thread[(ch, ts)] = req
        reqs.append(req)
    return reqs


# ---- delivery --------------------------------------------------------------------------------------------------
class Soak:
    def __init__(self, a):
        self.a = a
        self.tmp = Path(tempfile.mkdtemp(prefix="triage-soak-"))
        self.db = self.tmp / "soak.db"
        self.fake = SoakSlack(a.seed, a.fault_rate, a.fault_rate / 3).start()
        self.progress = threading.Condition()
        self.fake.on_answer = self._notify
        self.servers: dict[str, Server] = {}
        self.all_servers: list[Server] = []
        self.retries = Counter()
        self.kill_note = "not done"

    def _notify(self) -> None:
        with self.progress:
            self.progress.notify_all()

    def live(self) -> list[Server]:
        return [s for s in self.servers.values() if s.alive()]

    def start(self, slot: str, name: str) -> Server:
        s = Server(name, self.fake, self.db, self.tmp)
        self.all_servers.append(s)
        s.wait_ready()
        self.servers[slot] = s
        return s

    def send(self, req: Req, rnd: random.Random) -> None:
        try:
            self._deliver(req, rnd)
        except Exception as e:   # a soak fault, never silent: the request shows in the table with it
            req.deliveries.append(("soak", repr(e)))
        with self.progress:
            self.progress.notify_all()

    def _deliver(self, req: Req, rnd: random.Random) -> None:
        for attempt in range(8 if req.kind == "mention" else 1):
            live = self.live()
            if not live:
                time.sleep(0.5)
                continue
            target = rnd.choice(live)
            extra = {"X-Slack-Retry-Num": str(attempt), "X-Slack-Retry-Reason": "http_error"} if attempt else None
            if attempt:
                self.retries["after a failed delivery"] += 1
            try:
                status, reply, _ = post_signed(target.url, SECRET, req.body, req.ctype, extra)
            except (OSError, http.client.HTTPException) as e:   # refused, reset, cut short
                status, reply = type(e).__name__, b""
            req.deliveries.append((target.name, status))
            if status == 200:
                req.acked = True
                req.busy = req.busy or b"Busy" in reply
                break
            time.sleep(min(0.25 * (attempt + 1), 1.0))
        if req.dupe and req.acked:   # Slack thought the ack was late: the same event again, maybe elsewhere
            time.sleep(rnd.uniform(0, 1.5))
            live = self.live()
            if live:
                target = rnd.choice(live)
                self.retries["duplicate of an acked event"] += 1
                try:
                    status = post_signed(target.url, SECRET, req.body, req.ctype,
                                         {"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"})[0]
                except (OSError, http.client.HTTPException) as e:   # refused, reset, cut short
                    status = type(e).__name__
                req.deliveries.append((target.name, status))

    def outstanding(self, reqs: list[Req]) -> int:
        return sum(1 for r in reqs if r.t0 and not r.answers and (r.expected or not r.deliveries))

    def run(self) -> int:
        a, t_start = self.a, time.monotonic()
        logs = pastes()
        reqs = build(a.events, a.seed, a.retry_rate, self.fake, logs, tuple(map(float, a.mix.split(","))))
        with ThreadPoolExecutor(2) as pool:
            list(pool.map(lambda slot: self.start(slot, slot), ("a", "b")))
        t_sent0 = time.monotonic()
        kill_at = max(1, int(a.events * a.kill_at))
        rng = random.Random(a.seed + 1)
        with ThreadPoolExecutor(a.concurrency) as pool:
            for req in reqs:
                with self.progress:
                    self.progress.wait_for(lambda: self.outstanding(reqs) < a.window, timeout=15)
                if req.i == kill_at:
                    self._arm(rng.choice(("drop-after", "drop-before")))
                req.t0 = time.monotonic()
                pool.submit(self.send, req, random.Random(a.seed * 7919 + req.i))
        t_sent = time.monotonic()
        settled = self._settle(reqs)
        t_end = time.monotonic()
        for s in self.all_servers:
            s.stop()
        self.fake.stop()
        return self._report(reqs, t_start, t_sent0, t_sent, t_end, settled, len(logs))

    def _arm(self, mode: str) -> None:
        victim = self.servers["a"]
        self.fake.kill = {"token": victim.token, "proc": victim.proc, "mode": mode}
        armed = time.monotonic()

        def replace():
            try:
                victim.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:   # `a` posted nothing new in 30 s: kill it where it stands
                self.fake.kill = None
                victim.proc.send_signal(signal.SIGKILL)
                victim.proc.wait()
            k = self.fake.killed
            self.kill_note = (f"server a, {k['mode']} (mid-post, {time.monotonic() - armed:.1f} s after arming)"
                              if k else "server a, at a random moment (no post of its own in flight)")
            try:
                self.start("a", "a2")
            except SystemExit as e:   # reported, and the soak fails: nothing resumed what `a` left
                self.kill_note += f"; THE REPLACEMENT DID NOT START: {str(e)[-300:]}"
                self.replace_failed = True
        self.replacer = threading.Thread(target=replace, daemon=True)
        self.replacer.start()

    def _settle(self, reqs: list[Req]) -> bool:
        """Every expected answer in, nothing in progress in the database, and nothing new for a few seconds."""
        if hasattr(self, "replacer"):
            self.replacer.join(timeout=150)
        deadline, quiet_since, last = time.monotonic() + self.a.settle, time.monotonic(), -1
        while time.monotonic() < deadline:
            busy = self._db_busy()
            seen = len(self.fake.calls)
            if seen != last:
                quiet_since, last = time.monotonic(), seen
            if not busy and not self.outstanding(reqs) and time.monotonic() - quiet_since >= 3:
                return True
            time.sleep(0.5)
        return False

    def _db_busy(self) -> int:
        try:
            db = sqlite3.connect(f"file:{self.db}?mode=ro", uri=True, timeout=10)
            try:
                work = db.execute("select count(*) from work").fetchone()[0]
                box = db.execute("select count(*) from outbox where status in ('pending', 'posting')").fetchone()[0]
                return work + box
            finally:
                db.close()
        except sqlite3.Error:
            return 1

    def _report(self, reqs, t_start, t_sent0, t_sent, t_end, settled, n_logs) -> int:
        kinds = Counter(r.kind for r in reqs)
        expected = [r for r in reqs if r.expected]
        unacked = [r for r in reqs if not r.acked]
        lost = [r for r in expected if not r.answers]
        doubled = [r for r in reqs if len(r.answers) > 1]
        posted = sum(len(r.answers) for r in reqs)
        lat = sorted(r.answers[0][0] - r.t0 for r in expected if r.answers)
        tracebacks = {s.name: s.log.read_text(errors="replace").count("Traceback") for s in self.all_servers}
        resumed = sum(int(w.split("resumed ")[1].split()[0]) for s in self.all_servers
                      for w in s.log.read_text(errors="replace").splitlines() if "resumed " in w and " job(s)" in w)
        other = Counter(t for r in reqs for t in r.other)
        faults = self.fake.injected
        q = statistics.quantiles(lat, n=20) if len(lat) >= 2 else lat * 19 or [0.0] * 19
        rows = [
            ("requests", f"{len(reqs)}: {kinds['mention']} mentions, {kinds['slash']} /diagnose, "
                         f"{kinds['shortcut']} shortcuts ({n_logs} fixture logs; seed {self.a.seed})"),
            ("servers", f"2 on one database + 1 replacement: {', '.join(s.name for s in self.all_servers)}"),
            ("deliveries", f"{sum(len(r.deliveries) for r in reqs)}; retries {sum(self.retries.values())}: "
                           + ", ".join(f"{n} {k}" for k, n in sorted(self.retries.items()))),
            ("faults injected", f"{sum(faults.values())}: " + ", ".join(f"{k} {n}" for k, n in sorted(faults.items()))),
            ("kill -9", f"{self.kill_note}; jobs resumed by the replacement: {resumed}"),
            ("answers", f"expected {len(expected)}, posted {posted}, doubled {len(doubled)}, lost {len(lost)}"),
            ("not acked", f"{len(unacked)} (in flight at the kill; answered: {sum(1 for r in unacked if r.answers)})"),
            ("told busy", f"{sum(r.busy for r in reqs)}"),
            ("other replies", ", ".join(f"{n}x {t!r}" for t, n in other.most_common(3)) or "none"),
            ("tracebacks", ", ".join(f"{k} {n}" for k, n in tracebacks.items())),
            ("settled", "yes" if settled else f"NO (journal/outbox still busy after {self.a.settle:.0f} s)"),
            ("wall time", f"{t_end - t_start:.1f} s (sending {t_sent - t_sent0:.1f} s, "
                          f"settling {t_end - t_sent:.1f} s)"),
            ("answer latency", f"p50 {statistics.median(lat) if lat else 0:.2f} s, p95 {q[-1]:.2f} s, "
                               f"max {max(lat, default=0):.2f} s"),
        ]
        width = max(len(k) for k, _ in rows)
        print(f"soak: {self.a.events} requests, two `triage serve` on one store, faults, one kill -9")
        for k, v in rows:
            print(f"  {k:<{width}}  {v}")
        for r in (lost + doubled + unacked)[:10]:
            label = "NOT ACKED" if not r.acked else "LOST" if not r.answers else "DOUBLED"
            print(f"  {label} #{r.i} {r.kind} in {r.channel}: deliveries "
                  f"{r.deliveries}, answers {[(v, k) for _, v, k in r.answers]}")
        ok = not lost and not doubled and not any(tracebacks.values()) and settled and \
            not getattr(self, "replace_failed", False)
        print(f"  logs: {self.tmp}" if not ok else "  OK: every answer posted exactly once")
        if ok and not self.a.keep:
            import shutil
            shutil.rmtree(self.tmp, ignore_errors=True)
        return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1000, help="requests to send (default 1000)")
    ap.add_argument("--seed", type=int, default=31)
    ap.add_argument("--mix", default="6,3,1", help="weights of mentions, /diagnose and shortcuts (default 6,3,1)")
    ap.add_argument("--fault-rate", type=float, default=0.25, help="share of posts given a fault (default 0.25)")
    ap.add_argument("--retry-rate", type=float, default=0.15, help="share of acked events Slack re-sends")
    ap.add_argument("--kill-at", type=float, default=0.5, help="arm the kill after this share of the requests")
    ap.add_argument("--concurrency", type=int, default=8, help="requests being delivered at once")
    ap.add_argument("--window", type=int, default=16, help="requests sent but not yet answered, at most")
    ap.add_argument("--settle", type=float, default=300, help="seconds to wait for the work to settle")
    ap.add_argument("--keep", action="store_true", help="keep the database and the servers' logs")
    return Soak(ap.parse_args(argv)).run()


if __name__ == "__main__":
    sys.exit(main())
