"""A real `triage serve` killed with SIGKILL between storing a diagnosis and posting it loses nothing: the work was
written down (bot.store.journal) before it started, and the next `triage serve` on the database resumes it and posts the
answer exactly once, also when the first process was killed just after Slack took the post."""
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import FIXTURES, ROOT, SECRET

XID = (FIXTURES / "gpu_xid" / "xid79.log").read_text()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve(fake, db, **env):
    port = _port()
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "TRIAGE_"))}
    e.update({"SLACK_BOT_TOKEN": "xoxb-crash", "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_BASE_URL": fake.api,
              "TRIAGE_DB": str(db), **env})
    p = subprocess.Popen([sys.executable, "-m", "bot.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
                         cwd=ROOT, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2):
                return p, f"http://127.0.0.1:{port}/slack/events"
        except OSError:
            assert p.poll() is None, p.stderr.read().decode()
            assert time.monotonic() < deadline
            time.sleep(0.1)


def _answers(fake, root):
    return [m for m in fake.posted if m["thread_ts"] == root and "gpu_xid" in (m["text"] or "")]


@pytest.mark.parametrize("point", ["before-post", "after-post"])
def test_kill_9_mid_answer_is_resumed_and_posted_exactly_once(tmp_path, point):
    from bot.store.store import Store
    from testkit.fakeslack import FakeSlack, event_body, post_signed
    fake = FakeSlack().start()
    db = tmp_path / "t.db"
    try:
        fake.threads[("C1", "5.1")] = [{"user": "U1", "ts": "5.1", "text": "<@UBOT>\n" + XID}]
        first, url = _serve(fake, db, TRIAGE_TEST_CRASH=point)
        event = {"type": "app_mention", "user": "U1", "text": "<@UBOT> triage", "ts": "5.1", "channel": "C1"}
        assert post_signed(url, SECRET, event_body(event, "EvCrash"), "application/json")[0] == 200
        assert first.wait(timeout=60) == -9                     # killed at the point, by SIGKILL
        store = Store(db)
        assert store.recent(1)[0]["top_symptom"] == "gpu_xid"   # the diagnosis was stored …
        assert len(_answers(fake, "5.1")) == (point == "after-post")   # … and posted only if after the post
        assert [r["kind"] for r in store.db.query("select kind from work")] == ["on_mention"]
        second, _ = _serve(fake, db)
        try:
            fake.wait(lambda: _answers(fake, "5.1"), timeout=60)
            fake.wait(lambda: not list(store.db.query("select id from work")), timeout=30)
            time.sleep(0.5)
            assert len(_answers(fake, "5.1")) == 1
        finally:
            second.terminate()
            second.wait(timeout=30)
    finally:
        fake.stop()


def test_finished_work_is_struck_off_and_never_resumed(slack_bot):
    """The near miss: work that ended (answered) leaves nothing to resume."""
    h = slack_bot()
    h.fake.threads[("C1", "6.1")] = [{"user": "U1", "ts": "6.1", "text": "<@UBOT>\n" + XID}]
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT>", "ts": "6.1", "channel": "C1"}, "EvDone")
    h.fake.wait(lambda: any(p.get("name") == "white_check_mark" for p in h.fake.called("reactions.add")))
    h.fake.wait(lambda: not list(h.store.db.query("select id from work")))
    from bot.store.journal import Journal
    assert Journal(h.store).orphans() == []
