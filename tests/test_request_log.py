"""`triage serve` logs one line per request: its id, kind, status and milliseconds, secrets masked, nothing from a
body but the request's kind and id (tests/test_server_bodies.py covers the statuses themselves)."""
import logging
import re
import urllib.request

from conftest import FIXTURES

XID = (FIXTURES / "gpu_xid" / "xid79.log").read_text()
LINE = re.compile(r"^request id=(\S+) kind=(\S+) status=(\S+) ms=(\d+)$")


def _lines(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "triage.http" and r.getMessage().startswith("request")]


def test_one_line_per_request_with_id_kind_status_and_ms(slack_bot, caplog):
    caplog.set_level(logging.INFO, logger="triage.http")
    h = slack_bot()
    with urllib.request.urlopen(h.url + "/healthz") as r:
        assert r.status == 200
    h.slash("password=hunter2hunter2 " + XID)
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT> help", "ts": "1.1", "channel": "C1"}, "EvLog1")
    h.interactive({"type": "block_actions", "user": {"id": "U1"}, "trigger_id": "tr9",
                   "actions": [{"action_id": "triage_vote_up", "value": "999"}]})
    h.post("{}", "application/json", ts=1)   # a replay: refused unsigned
    h.fake.wait(lambda: len(_lines(caplog)) >= 5)
    lines = _lines(caplog)
    parsed = [LINE.match(x) for x in lines]
    assert all(parsed), lines
    seen = {(m.group(2), m.group(3)) for m in parsed}
    assert ("get:/healthz", "200") in seen and ("command:/diagnose", "200") in seen
    assert ("event:app_mention", "200") in seen and ("block_actions:triage_vote_up", "200") in seen
    assert ("post", "401") in seen
    assert any(m.group(1) == "EvLog1" for m in parsed) and any(m.group(1) == "tr9" for m in parsed)
    assert "hunter2" not in "\n".join(lines) and "xoxb-test-token" not in "\n".join(lines)


def test_a_request_id_or_kind_made_of_secrets_and_control_characters_is_masked(slack_bot, caplog):
    """The near miss: what Slack sends as an id is still client text: a token in it is masked, a newline is not
    a second log line."""
    caplog.set_level(logging.INFO, logger="triage.http")
    h = slack_bot()
    h.event({"type": "app_mention\nrequest id=forged", "user": "U1", "text": "hi", "ts": "1.2", "channel": "C1"},
            "xoxb-1234567890-abcdefghijkl")
    h.fake.wait(lambda: _lines(caplog))
    lines = _lines(caplog)
    assert len(lines) == 1 and LINE.match(lines[0]) and "xoxb-1234567890" not in lines[0] and "\n" not in lines[0]
