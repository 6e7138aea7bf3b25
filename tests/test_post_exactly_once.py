"""An answer Slack took but whose reply was lost (a 503 after Slack did the work, a connection dropped before the
reply) is shown once: every post carries a key in its metadata from the first attempt, the SDK never re-posts on
its own, and every retry (at once, or later from the outbox, in this process or another) first looks the message
up by that key. The fake Slack (testkit/fakeslack.py `faults`) does the work and then loses the reply."""
from datetime import datetime, timedelta, timezone

import pytest

from conftest import FIXTURES

XID = (FIXTURES / "gpu_xid" / "xid79.log").read_text()


def _mention(h, root: str, event_id: str) -> None:
    h.fake.threads[("C1", root)] = [{"user": "U1", "ts": root, "text": "<@UBOT>\n" + XID}]
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT>\n" + XID, "ts": root, "channel": "C1"}, event_id)
    h.fake.wait(lambda: any(p.get("name") == "white_check_mark" for p in h.fake.called("reactions.add")))


def _drain(h, minutes: int = 1) -> int:
    """What `triage serve`'s outbox worker does a little later (a fresh process on the same database)."""
    from bot.slack.outbox import Outbox
    from bot.wiring import slack_client
    return Outbox(h.store).drain(slack_client(h.settings), datetime.now(timezone.utc) + timedelta(minutes=minutes))


def _in_thread(h, root: str) -> list[dict]:
    return [m for m in h.fake.posted if m["channel"] == "C1" and m["thread_ts"] == root]


@pytest.mark.parametrize("fault", ["503-after", "drop-after", "503-before", "drop-before"])
def test_a_thread_answer_whose_reply_is_lost_is_posted_exactly_once(slack_bot, fault):
    h = slack_bot()
    h.fake.faults["chat.postMessage"] = [fault]
    _mention(h, "7.1", "EvOnce")
    _drain(h)
    _drain(h, 10)
    posted = _in_thread(h, "7.1")
    assert len(posted) == 1, [m["text"] for m in posted]
    assert posted[0]["metadata"]["event_type"] == "triage_answer"
    pending = list(h.store.db.query("select status from outbox where status != 'sent'"))
    assert pending == []


def test_a_retry_from_the_outbox_whose_reply_is_lost_again_is_not_posted_twice(slack_bot):
    """Slack is down at first (nothing taken); the outbox's retry is taken but its reply lost; the next retry
    finds the message instead of posting it again."""
    h = slack_bot()
    h.fake.faults["chat.postMessage"] = ["503-before", "503-after"]
    _mention(h, "8.1", "EvAgain")
    assert _in_thread(h, "8.1") == []
    assert _drain(h) == 1           # the client's own look-up found the post the lost reply was about
    assert _drain(h, 20) == 0
    assert len(_in_thread(h, "8.1")) == 1


def test_a_channel_post_dropped_after_slack_took_it_is_found_in_the_history(tmp_path):
    """Outside a thread (notify posts to the channel) the look-up reads conversations.history."""
    from bot.slack.outbox import Outbox
    from bot.settings import Settings
    from bot.store.store import Store
    from bot.wiring import slack_client
    from testkit.fakeslack import FakeSlack
    fake = FakeSlack().start()
    try:
        settings = Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-t", "SLACK_API_BASE_URL": fake.api,
                                      "TRIAGE_DB": str(tmp_path / "o.db")})
        fake.faults["chat.postMessage"] = ["drop-after"]
        box = Outbox(Store(settings.db))
        ts = box.post(slack_client(settings), {"channel": "C9", "text": "job 12 failed"})
        assert ts and [m["ts"] for m in fake.posted] == [ts] and fake.called("conversations.history")
        assert box.pending() == []
    finally:
        fake.stop()


def test_other_calls_keep_the_sdks_retry_on_a_dropped_connection(tmp_path):
    """The near miss: only chat.postMessage loses the SDK's blind retry; a look-up is still retried."""
    from bot.settings import Settings
    from bot.wiring import slack_client
    from testkit.fakeslack import FakeSlack
    fake = FakeSlack().start()
    try:
        settings = Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-t", "SLACK_API_BASE_URL": fake.api,
                                      "TRIAGE_DB": str(tmp_path / "o.db")})
        fake.faults["users.info"] = ["drop-before"]
        assert slack_client(settings).users_info(user="U1")["ok"]
        assert len(fake.called("users.info")) == 2
    finally:
        fake.stop()
