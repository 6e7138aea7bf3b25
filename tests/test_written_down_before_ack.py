"""Work is written down (bot.journal) before Slack gets its 200: Slack never resends an acked event, command or
shortcut, so a process killed between the ack and the journal lost the answer (bench/soak.py found it: mentions and
a /diagnose acked by the server it killed, never answered). An event's id and its job are stored in one
transaction, and a retry of it runs nothing twice; a /diagnose or shortcut is written down once, by whichever of its
ack and its lazy listener comes first."""
import time

from conftest import FIXTURES

XID = (FIXTURES / "gpu_xid" / "xid79.log").read_text()


def _held(monkeypatch):
    """Jobs are taken but never run: what a process killed right after its ack leaves behind."""
    from bot.slack.workqueue import WorkQueue
    monkeypatch.setattr(WorkQueue, "submit", lambda self, job, reserved=False: True)


def test_a_mention_is_written_down_before_it_is_acked(slack_bot, monkeypatch):
    _held(monkeypatch)
    h = slack_bot()
    h.fake.threads[("C1", "9.1")] = [{"user": "U1", "ts": "9.1", "text": "<@UBOT>\n" + XID}]
    event = {"type": "app_mention", "user": "U1", "text": "<@UBOT> why", "ts": "9.1", "channel": "C1"}
    assert h.event(event, "EvAck")[0] == 200
    rows = list(h.store.db.query("select kind, request_json from work"))   # at once: no waiting for a thread
    assert [r["kind"] for r in rows] == ["on_mention"] and '"9.1"' in rows[0]["request_json"]
    assert list(h.store.db.query("select event_id from events")) == [{"event_id": "EvAck"}]


def test_a_retry_of_a_written_down_event_adds_no_second_job(slack_bot, monkeypatch):
    _held(monkeypatch)
    h = slack_bot()
    event = {"type": "app_mention", "user": "U1", "text": "<@UBOT> why", "ts": "9.2", "channel": "C1"}
    assert h.event(event, "EvTwice")[0] == 200
    assert h.event(event, "EvTwice", extra={"X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"})[0] == 200
    assert [r["kind"] for r in h.store.db.query("select kind from work")] == ["on_mention"]


def test_a_slash_command_and_a_shortcut_are_written_down_once_before_they_are_acked(slack_bot, monkeypatch):
    _held(monkeypatch)
    h = slack_bot()
    assert h.slash(XID[:3000])[0] == 200
    assert [r["kind"] for r in h.store.db.query("select kind from work")] == ["run_diagnose"]
    shortcut = {"type": "message_action", "callback_id": "diagnose_message", "trigger_id": "77.1",
                "team": {"id": "T1"}, "channel": {"id": "C1"}, "user": {"id": "U1"},
                "message": {"type": "message", "user": "U1", "ts": "9.3", "text": XID[:3000]},
                "response_url": h.fake.response_url(2)}
    assert h.interactive(shortcut)[0] == 200
    assert [r["kind"] for r in h.store.db.query("select kind from work order by id")] == ["run_diagnose",
                                                                                          "run_shortcut"]
    time.sleep(0.5)   # their lazy listeners ran too: the same entries, no second one
    assert [r["kind"] for r in h.store.db.query("select kind from work order by id")] == ["run_diagnose",
                                                                                          "run_shortcut"]


def test_an_answered_slash_command_leaves_nothing_to_resume(slack_bot):
    """Struck off once its response_url answer is out (that answer cannot be looked up to skip it after a crash),
    and no second entry from the listener's own admission check."""
    h = slack_bot()
    assert h.slash(XID[:3000])[0] == 200
    h.fake.wait(lambda: h.fake.responses)
    h.fake.wait(lambda: not list(h.store.db.query("select id from work")))
    time.sleep(0.3)
    assert list(h.store.db.query("select id from work")) == [] and len(h.fake.responses) == 1
