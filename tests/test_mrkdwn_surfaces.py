"""Slack control sequences planted in a log, a question or a model's answer never become live on any surface the bot
posts to: the weekly report's summary, the App Home, a question's phrased answer, a notify header, and anything a
future surface builds without escaping (bot.answer.mrkdwn's pass over every outgoing call)."""
import json

import pytest

from conftest import FIXTURES

PING = "<!channel>"
LINK = "<mailto:it@corp.example|Re-authenticate>"
LIVE = ("<!channel>", "<!here>", "<mailto:", "<https://evil", "<!subteam")


def _live(obj) -> list[str]:
    dumped = json.dumps(obj, ensure_ascii=False)
    return [s for s in LIVE if s in dumped]


def test_weekly_report_summary_from_slash_report_shows_planted_text_inert(slack_bot, run):
    """tune_next holds an unrecognised error's template; the summary joined it into mrkdwn unescaped."""
    h = slack_bot()
    for n in (17, 23):   # the same unrecognised error in two diagnoses: 'Write a playbook for …' in tune_next
        line = f"RuntimeError: Checkpoint shard {n} lost {PING} {LINK}\n"
        h.store.record(run(line), line.encode(), source="slash", channel="C1", job_key=f"job-{n}")
    h.slash("report", channel="C1")
    h.fake.wait_calls("files.completeUploadExternal")
    summary = h.fake.called("chat.postMessage")[0]["text"]
    assert "Weekly tuning report" in summary and "Write a playbook" in summary
    assert _live(summary) == [] and "&lt;!channel&gt;" in summary


def test_report_summary_escapes_what_it_joins(run, tmp_path):
    from datetime import datetime, timedelta, timezone

    from bot.report.data import build
    from bot.report.markdown import summary
    from bot.store.store import Store
    store = Store(tmp_path / "r.db")
    for n in (17, 23):
        line = f"RuntimeError: Checkpoint shard {n} lost {PING}\n"
        store.record(run(line), line.encode())
    now = datetime.now(timezone.utc)
    text = summary(build(store, now - timedelta(days=7), now + timedelta(minutes=1)))
    assert PING not in text and "&lt;!channel&gt;" in text


def test_app_home_shows_a_finding_title_from_the_log_inert(slack_bot):
    """A team rule's title is filled from the log (`{server}`): a planted link in it must not be live at home."""
    from bot.wiring import engine
    from core.ingest import from_bytes
    h = slack_bot(TRIAGE_PLAYBOOKS=str(FIXTURES / "team"))
    line = f"LustreError: 11-0: Lustre: fsx-MDT0000: Connection to {LINK} (at 10.0.0.5@tcp) was lost\n"
    d = engine(h.settings).diagnose(from_bytes(line.encode(), "fsx.log"))
    assert LINK in d.findings[0].title
    h.store.record(d, line.encode(), source="slash", team="T1", channel="C1", user="U7")
    h.event({"type": "app_home_opened", "user": "U7", "tab": "home"}, "EvHome")
    view = h.fake.wait_calls("views.publish")[0]["view"]
    view = json.loads(view) if isinstance(view, str) else view
    text = json.dumps(view)
    assert "fsx_lost" in text and _live(view) == [] and "&lt;mailto:" in text


def test_a_phrased_question_answer_echoing_the_question_is_inert(slack_bot):
    """With an LLM set, a model that echoes the question back (a ping in it) must not post a live ping."""
    from testkit.fakellm import FakeLLM

    def echo(req):
        q = json.loads(req["messages"][-1]["content"])
        cite = q["sections"][0]["id"]
        return {"summary": f"You asked: {q['question']} See [{cite}].", "steps": [], "citations": [cite]}
    llm = FakeLLM(reply=echo)
    try:
        h = slack_bot(TRIAGE_LLM="openai:gpt-test", TRIAGE_LLM_BASE_URL=llm.url)
        h.slash("why does allreduce hang on p5 <!channel> <https://evil.example/x|the fix>")
        resp = h.fake.wait(lambda: h.fake.responses)[0]
        assert llm.requests and "You asked" in json.dumps(resp)
        assert _live(resp) == [] and "&lt;!channel&gt;" in json.dumps(resp)
    finally:
        llm.stop()


def test_notify_header_with_a_planted_job_id_is_inert(tmp_path):
    from bot.proactive.notify import Notifier
    from bot.settings import Settings
    from bot.wiring import store as make_store
    from testkit.fakeslack import FakeSlack
    fake = FakeSlack().start()
    try:
        settings = Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-t", "SLACK_API_BASE_URL": fake.api,
                                      "TRIAGE_DB": str(tmp_path / "n.db")})
        log = FIXTURES / "gpu_xid" / "xid79.log"
        out = Notifier(settings, make_store(settings), "C9").job([(str(log), "xid79.log")], f"job {PING} {LINK}", 1)
        assert out.status == "posted"
        post = fake.called("chat.postMessage")[0]
        assert "Job job" in json.dumps(post) and _live(post) == []
    finally:
        fake.stop()


@pytest.mark.parametrize("planted", [PING, "<!here>", "<!subteam^S123|oncall>", LINK,
                                     "<https://evil.example/login|runbook>", "<@U0ADMIN|admin>"])
def test_every_outgoing_call_is_defused_even_when_a_builder_forgot(planted, tmp_path):
    """The last pass: text a builder did not escape (here posted raw through the bot's client) is still inert,
    in `text`, in blocks and in a view; the bot's own mentions by id and runbook links stay live."""
    from bot.settings import Settings
    from bot.wiring import slack_client
    from testkit.fakeslack import FakeSlack
    fake = FakeSlack().start()
    try:
        settings = Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-t", "SLACK_API_BASE_URL": fake.api,
                                      "TRIAGE_RUNBOOK_URL": "https://wiki.example/runbook",
                                      "TRIAGE_DB": str(tmp_path / "n.db")})
        client = slack_client(settings)
        own = "<@U123ABC> see <https://wiki.example/runbook/efa.md#fork|efa#fork> in <#C0123>"
        block = {"type": "section", "text": {"type": "mrkdwn", "text": f"{planted} {own}"}}
        client.chat_postMessage(channel="C1", text=f"x {planted}", blocks=[block])
        client.views_publish(user_id="U1", view={"type": "home", "blocks": [block]})
        post, view = fake.called("chat.postMessage")[0], fake.called("views.publish")[0]
        for sent in (post, view):
            dumped = json.dumps(sent)
            assert planted not in dumped and own in dumped
        assert planted.replace("<", "&lt;").replace(">", "&gt;") in post["text"]
    finally:
        fake.stop()
