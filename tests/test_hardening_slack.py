"""Slack abuse and faults: replays, floods, Slack outages, broken databases. Nothing crashes, nothing is lost."""
import json
import os
import subprocess
import sys
import time

from conftest import FIXTURES, ROOT

OOM = (FIXTURES / "cuda_oom" / "new_format_fragmented.log").read_text()
XID = (FIXTURES / "gpu_xid" / "xid79.log").read_text()


def test_replayed_request_older_than_five_minutes_is_refused(slack_bot):
    from testkit.fakeslack import slash_body
    h = slack_bot()
    status, _, _ = h.post(slash_body(OOM, h.fake.response_url()), "application/x-www-form-urlencoded",
                          ts=int(time.time()) - 6 * 60)
    assert status == 401 and h.store.recent() == []


def test_per_user_rate_limit_answers_clearly(slack_bot):
    h = slack_bot(TRIAGE_RATE_LIMIT="2/60")
    for _ in range(2):
        assert "Diagnosing" in h.slash(XID, user="U5")[1].decode()
    status, body, _ = h.slash(XID, user="U5")
    assert status == 200 and "limit for one person" in body.decode()
    assert "Diagnosing" in h.slash(XID, user="U6")[1].decode()  # others are not affected
    h.fake.wait(lambda: len(h.fake.responses) >= 3)
    time.sleep(0.5)
    assert len(h.fake.responses) == 3 and len(h.store.recent(10)) == 3


def test_answer_survives_a_slack_outage_and_is_sent_after_restart(slack_bot, tmp_path):
    from slack_sdk import WebClient

    from bot.slack.outbox import Outbox
    h = slack_bot()
    h.fake.fail["chat.postMessage"] = (503, {"ok": False, "error": "service_unavailable"})
    h.fake.threads[("C1", "7.1")] = [{"user": "U1", "ts": "7.1", "text": "<@UBOT>\n" + XID}]
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT>\n" + XID, "ts": "7.1", "channel": "C1"}, "EvO")
    h.fake.wait(lambda: any(p.get("name") == "white_check_mark" for p in h.fake.called("reactions.add")))
    box = Outbox(h.store, on_sent=lambda did, ch, ts: did and h.store.set_message(did, ch, ts))
    assert len(box.pending()) == 1 and h.store.recent(1)[0]["top_symptom"] == "gpu_xid"
    # Slack comes back; a new process (new Outbox on the same database) delivers it, exactly once
    del h.fake.fail["chat.postMessage"]
    client = WebClient(token="xoxb-test-token", base_url=h.fake.api)
    from datetime import datetime, timedelta, timezone
    later = datetime.now(timezone.utc) + timedelta(minutes=1)
    before = len(h.fake.called("chat.postMessage"))
    assert Outbox(h.store).drain(client, later) == 1
    assert Outbox(h.store).drain(client, later + timedelta(minutes=5)) == 0
    posts = h.fake.called("chat.postMessage")[before:]
    assert len(posts) == 1 and "Root cause: gpu_xid" in str(posts[0]["blocks"]) and posts[0]["thread_ts"] == "7.1"
    assert box.pending() == []


def test_rate_limited_by_slack_backs_off(tmp_path):
    from datetime import datetime, timedelta, timezone

    from slack_sdk import WebClient

    from bot.slack.outbox import Outbox
    from bot.store.store import Store
    from testkit.fakeslack import FakeSlack
    fake = FakeSlack().start()
    try:
        fake.fail["chat.postMessage"] = (429, {"ok": False, "error": "ratelimited"})
        store = Store(tmp_path / "o.db")
        box = Outbox(store)
        client = WebClient(token="xoxb-x", base_url=fake.api)
        assert box.post(client, {"channel": "C1", "text": "hi"}) is None
        now = datetime.now(timezone.utc)
        assert box.drain(client, now) == 0                       # not due yet
        assert box.drain(client, now + timedelta(seconds=10)) == 0  # due, fails again, backs off
        item = box.pending()[0]
        assert item["attempts"] == 2 and item["next_at"] > (now + timedelta(seconds=30)).isoformat(timespec="seconds")
        del fake.fail["chat.postMessage"]
        assert box.drain(client, now + timedelta(hours=1)) == 1
    finally:
        fake.stop()


def _serve_err(env):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "TRIAGE_"))}
    e.update({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s", **env})
    p = subprocess.run([sys.executable, "-m", "bot.cli", "serve", "--port", "1"], capture_output=True, cwd=ROOT,
                       env=e, timeout=60)
    return p.returncode, p.stderr.decode()


def test_corrupt_database_is_reported_clearly_at_start(tmp_path):
    db = tmp_path / "bad.db"
    db.write_bytes(b"this is not sqlite at all" * 200)
    code, err = _serve_err({"TRIAGE_DB": str(db)})
    assert code == 2 and "TRIAGE_DB" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_online_backup_copies_every_diagnosis(tmp_path, run):
    import sqlite3

    from bot.store.store import Store
    store = Store(tmp_path / "live.db")
    for i in range(5):
        store.record(run(XID), source="cli")
    env = {**os.environ, "TRIAGE_DB": str(tmp_path / "live.db")}
    r = subprocess.run([sys.executable, "-m", "bot.cli", "db", "backup", str(tmp_path / "copy.db")],
                       capture_output=True, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr
    assert sqlite3.connect(tmp_path / "copy.db").execute("select count(*) from diagnoses").fetchone()[0] == 5
    assert sqlite3.connect(tmp_path / "live.db").execute("pragma journal_mode").fetchone()[0] == "wal"


def test_secrets_never_reach_the_store_or_the_logs(slack_bot, caplog):
    import logging
    import sqlite3
    caplog.set_level(logging.DEBUG)
    secrets = ["AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
               "xoxb-123456789012-123456789012-abcdefABCDEF", "s3cr3tP4ssw0rd"]
    log = (f"export AWS_ACCESS_KEY_ID={secrets[0]}\nexport AWS_SECRET_ACCESS_KEY={secrets[1]}\n"
           f"git remote https://{secrets[2]}@github.com/x/y\nSLACK_BOT_TOKEN={secrets[3]}\n"
           f"MLFLOW_URI=https://ops:{secrets[4]}@mlflow:5000 [rank0]: torch.OutOfMemoryError: CUDA out of memory. "
           f"Tried to allocate 2.00 GiB token={secrets[2]}\n" + OOM)
    h = slack_bot()
    h.slash(log)
    h.fake.wait(lambda: h.fake.responses)
    dump = "\n".join(sqlite3.connect(h.settings.db).iterdump())
    for s in secrets:
        assert s not in dump
        assert s not in caplog.text
    assert "cuda_oom" in dump


def test_a_database_with_corrupt_pages_is_refused_at_start(tmp_path, run):
    """The header is intact, so the database opens; quick_check finds the damaged pages and serve refuses."""
    from bot.store.store import Store
    db = tmp_path / "pages.db"
    store = Store(db)
    for _ in range(40):
        store.record(run(XID), source="cli")
    store.db.conn.execute("pragma wal_checkpoint(TRUNCATE)")
    store.db.conn.close()
    raw = bytearray(db.read_bytes())
    assert len(raw) > 8 * 4096
    for off in range(len(raw) - 3 * 4096, len(raw), 4096):   # break the b-tree headers of the last data pages
        raw[off: off + 12] = b"\x07" * 12
    db.write_bytes(bytes(raw))
    code, err = _serve_err({"TRIAGE_DB": str(db)})
    assert code == 2 and "TRIAGE_DB" in err and "damaged" in err and len(err.strip().splitlines()) == 1


def _raw(url: str, data: bytes, timeout: float = 10.0) -> bytes:
    """Send raw bytes to the bot's HTTP port and return what comes back (b'' when the server just closes)."""
    import socket
    from urllib.parse import urlparse
    u = urlparse(url)
    with socket.create_connection((u.hostname, u.port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
                if b"\r\n\r\n" in out:
                    break
        except TimeoutError:
            pass
        return out


def _request(body: bytes, headers: dict[str, str]) -> bytes:
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"POST /slack/events HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode() + body


def test_the_body_cap_holds_whatever_content_length_says(slack_bot):
    h = slack_bot()
    big = 3 << 20   # claimed or real size over the 512 KiB cap: answered on the headers, the body is never read
    for length in ("-1", "abc", str(big)):
        reply = _raw(h.url, _request(b"x" * 1024, {"Content-Length": length, "Content-Type": "application/json"}))
        assert reply.split(b" ")[1] in (b"400", b"413"), (length, reply[:80])
    assert b" 411 " in _raw(h.url, _request(b"{}", {"Content-Type": "application/json"}))[:20]


def test_signature_is_checked_before_parsing_and_garbage_gets_400_not_a_traceback(slack_bot):
    from testkit.fakeslack import signed_headers
    h = slack_bot()
    for body, ctype in (("{not json", "application/json"), ("payload=%7Bnot-json", "application/x-www-form-urlencoded")):
        headers = {"Content-Type": ctype, "Content-Length": str(len(body)), **signed_headers("test-signing-secret", body)}
        reply = _raw(h.url, _request(body.encode(), headers))
        assert reply.split(b" ")[1] == b"400", reply[:120]
    body = "{}"
    headers = {"Content-Type": "application/json", "Content-Length": "2", "X-Slack-Request-Timestamp": "soon",
               "X-Slack-Signature": "v0=00"}
    assert _raw(h.url, _request(body.encode(), headers)).split(b" ")[1] == b"401"
    forged = {"Content-Type": "application/json", "Content-Length": "9", **signed_headers("wrong-secret", "{not json")}
    assert _raw(h.url, _request(b"{not json", forged)).split(b" ")[1] == b"401"


def test_idle_and_half_sent_connections_are_closed(slack_bot, monkeypatch):
    import socket
    import time as _time
    from urllib.parse import urlparse
    monkeypatch.setattr("bot.slack.server.READ_TIMEOUT", 0.5)
    h = slack_bot()
    u = urlparse(h.url)
    t0 = _time.monotonic()
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(_request(b'{"type": "ur', {"Content-Length": "500", "Content-Type": "application/json"}))
        assert s.recv(100) == b""               # the server gave up on the rest of the body and closed
    assert _time.monotonic() - t0 < 8
    with urllib_get(h.url + "/healthz") as r:   # and it still serves
        assert r.status == 200


def urllib_get(url):
    import urllib.request
    return urllib.request.urlopen(url, timeout=10)


def test_many_silent_connections_hold_a_bounded_number_of_threads(slack_bot, monkeypatch):
    import socket
    import threading
    import time as _time
    from urllib.parse import urlparse
    monkeypatch.setattr("bot.slack.server.READ_TIMEOUT", 1.0)
    monkeypatch.setattr("bot.slack.server.MAX_CONNECTIONS", 4)
    h = slack_bot()
    u = urlparse(h.url)
    before = threading.active_count()
    socks = [socket.create_connection((u.hostname, u.port), timeout=5) for _ in range(40)]
    _time.sleep(0.5)
    assert threading.active_count() - before <= 4 + 2
    for s in socks:
        s.close()
    _time.sleep(1.5)                                    # the held ones time out and free their slots
    with urllib_get(h.url + "/healthz") as r:
        assert r.status == 200


def test_a_full_work_queue_says_busy_with_a_retry_time_instead_of_queueing_forever(slack_bot, monkeypatch):
    import threading

    from bot.service import Triage
    monkeypatch.setattr("bot.slack.workqueue.MAX_PENDING", 1)
    gate = threading.Event()
    real = Triage.run

    def slow(self, *a, **k):
        gate.wait(10)
        return real(self, *a, **k)
    monkeypatch.setattr(Triage, "run", slow)
    h = slack_bot()
    first = h.slash(XID, user="U7")[1].decode()
    second = h.slash(XID, user="U8")[1].decode()
    assert "Diagnosing" in first and "Busy" in second and "retry in about" in second
    h.event({"type": "app_mention", "user": "U9", "text": "<@UBOT>", "ts": "9.2", "thread_ts": "9.1",
             "channel": "C1"}, "EvBusy")
    busy = h.fake.wait(lambda: [p for p in h.fake.called("chat.postMessage") if "Busy" in p.get("text", "")])
    assert busy[0]["thread_ts"] == "9.1"
    gate.set()
    h.fake.wait(lambda: h.fake.responses)
    time.sleep(0.5)
    assert len(h.fake.responses) == 1 and len(h.store.recent(10)) == 1   # the refused ones were not half-done


def test_a_full_disk_still_answers_and_says_the_diagnosis_was_not_stored(slack_bot, monkeypatch):
    """SQLite's real 'database or disk is full' (the page limit pinned at the current size), not a mock error."""
    from bot.store.store import Store
    real = Store.record

    def full(self, *a, **k):
        pages = self.db.conn.execute("pragma page_count").fetchone()[0]
        self.db.conn.execute(f"pragma max_page_count = {pages}")
        return real(self, *a, **k)
    monkeypatch.setattr(Store, "record", full)
    h = slack_bot()
    for _ in range(3):
        h.slash(OOM + "\n" + "x" * 20000)
    h.fake.wait(lambda: len(h.fake.responses) >= 3)
    texts = [json.dumps(r) for r in h.fake.responses]
    assert all("Root cause: cuda_oom" in t for t in texts)
    assert any("could not be stored" in t and "full" in t for t in texts)


def _queued_answer(h):
    """One answer waiting in the outbox after a Slack outage, and a working client again."""
    from slack_sdk import WebClient
    h.fake.fail["chat.postMessage"] = (503, {"ok": False, "error": "service_unavailable"})
    h.fake.threads[("C1", "8.1")] = [{"user": "U1", "ts": "8.1", "text": "<@UBOT>\n" + XID}]
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT>\n" + XID, "ts": "8.1", "channel": "C1"}, "EvQ")
    h.fake.wait(lambda: any(p.get("name") == "white_check_mark" for p in h.fake.called("reactions.add")))
    del h.fake.fail["chat.postMessage"]
    return WebClient(token="xoxb-test-token", base_url=h.fake.api)


def test_two_serve_processes_never_both_post_one_outbox_item(slack_bot):
    from datetime import datetime, timedelta, timezone

    from bot.slack.outbox import Outbox
    h = slack_bot()
    client = _queued_answer(h)
    later = datetime.now(timezone.utc) + timedelta(minutes=1)
    a, b = Outbox(h.store), Outbox(h.store)
    inner = []

    class Racing:   # while A is posting, B drains the same database (another triage serve)
        def __getattr__(self, name):
            return getattr(client, name)

        def chat_postMessage(self, **kw):
            inner.append(b.drain(client, later))
            return client.chat_postMessage(**kw)
    before = len(h.fake.called("chat.postMessage"))
    assert a.drain(Racing(), later) == 1 and inner == [0]
    assert len(h.fake.called("chat.postMessage")) - before == 1


def test_a_post_in_flight_at_kill_9_is_not_posted_twice(slack_bot):
    from datetime import datetime, timedelta, timezone

    from bot.slack.outbox import Outbox
    h = slack_bot()
    client = _queued_answer(h)
    later = datetime.now(timezone.utc) + timedelta(minutes=1)
    dead = Outbox(h.store)
    item = dead.pending()[0]
    assert dead._claim(item, later.isoformat(timespec="seconds"))           # the first process took it …
    payload = json.loads(item["payload_json"])
    client.chat_postMessage(**payload)                                      # … Slack got it, then kill -9
    before = len(h.fake.called("chat.postMessage"))
    restarted = Outbox(h.store)
    assert restarted.drain(client, later + timedelta(seconds=30)) == 0      # still leased to the dead one
    assert restarted.drain(client, later + timedelta(minutes=5)) == 1       # lease over: found, not re-posted
    assert len(h.fake.called("chat.postMessage")) == before
    row = h.store.db["outbox"].get(item["id"])
    assert row["status"] == "sent" and row["sent_ts"]


def test_a_diagnose_whose_lazy_listener_starts_before_its_ack_is_admitted_once(tmp_path, engine, monkeypatch):
    """Bolt starts a command's ack function and its lazy listener at the same moment; on a loaded machine the lazy
    one can take the work queue's place first. The ack must then still say 'Diagnosing' (not 'Busy' about its own
    job), the job must run once, and the next command must be told the queue is full."""
    import threading

    from bot.service import Triage
    from bot.settings import Settings
    from bot.slack.app import create_app
    from knowledge.runbook import load as load_runbook
    from testkit.fakeslack import FakeSlack
    monkeypatch.setattr("bot.slack.workqueue.MAX_PENDING", 1)
    fake = FakeSlack().start()
    settings = Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-test-token", "SLACK_SIGNING_SECRET": "s",
                                  "SLACK_API_BASE_URL": fake.api, "TRIAGE_DB": str(tmp_path / "t.db")})
    bot = create_app(settings, Triage(engine, load_runbook(), None)).triage_bot
    gate, ran = threading.Event(), []

    def job(command, **_):
        ran.append(command["trigger_id"])
        gate.wait(10)
    lazy = bot.offload(job)
    first = {"trigger_id": "T1", "text": "NVRM: Xid 79", "user_id": "U1", "channel_id": "C1"}
    second = {**first, "trigger_id": "T2", "user_id": "U2"}
    acks = []
    lazy(command=first)                                     # the lazy listener wins the race
    bot.ack_diagnose(lambda text: acks.append(text), first)
    bot.ack_diagnose(lambda text: acks.append(text), second)
    lazy(command=second)
    gate.set()
    bot.work.pool.shutdown(wait=True)
    fake.stop()
    assert "Diagnosing" in acks[0] and "Busy" in acks[1]
    assert ran == ["T1"] and bot.work.pending == 0
