"""`/diagnose report` shows the diagnoses of the channel it is asked in, never another channel's (a private channel's
least of all): the summary, report.md and its charts all come from that channel's rows only."""
from conftest import FIXTURES

OOM = (FIXTURES / "cuda_oom" / "new_format_fragmented.log").read_text()
HANG = (FIXTURES / "nccl_timeout" / "lagging_rank.log").read_text()


def _report_md(fake) -> str:
    """The uploaded report.md (the first file of the files_upload_v2 call)."""
    done = fake.wait_calls("files.completeUploadExternal")[0]
    assert done
    return next(data.decode() for data in fake.uploads.values() if data.startswith(b"# Train Triage"))


def test_slash_report_covers_only_the_channel_it_is_asked_in(slack_bot, run):
    h = slack_bot()
    h.store.record(run(OOM), OOM.encode(), source="slash", team="T1", channel="CPRIVATE", user="U9",
                   job_key="secret-job")
    h.store.record(run(HANG), HANG.encode(), source="slash", team="T1", channel="C1", user="U1", job_key="open-job")
    h.slash("report", channel="C1")
    md = _report_md(h.fake)
    summary = h.fake.called("chat.postMessage")[0]["text"]
    assert "1 diagnoses in this channel" in summary and "nccl_timeout" in summary
    assert "cuda_oom" not in summary
    assert "nccl_timeout" in md and "cuda_oom" not in md and "CPRIVATE" not in md and "secret-job" not in md


def test_slash_report_in_a_channel_without_diagnoses_shows_none(slack_bot, run):
    """The near miss: a channel with nothing of its own gets an empty report, not the team's."""
    h = slack_bot()
    h.store.record(run(OOM), OOM.encode(), source="slash", team="T1", channel="CPRIVATE", user="U9")
    h.slash("report", channel="C2")
    md = _report_md(h.fake)
    summary = h.fake.called("chat.postMessage")[0]["text"]
    assert "0 diagnoses in this channel" in summary and "cuda_oom" not in summary + md


def test_the_cli_report_still_covers_every_channel(run, tmp_path):
    from datetime import datetime, timedelta, timezone

    from bot.report.data import build
    from bot.store.store import Store
    store = Store(tmp_path / "r.db")
    store.record(run(OOM), OOM.encode(), channel="CPRIVATE")
    store.record(run(HANG), HANG.encode(), channel="C1")
    now = datetime.now(timezone.utc)
    everything = build(store, now - timedelta(days=7), now + timedelta(minutes=1))
    one = build(store, now - timedelta(days=7), now + timedelta(minutes=1), ("C1",))
    assert everything.total == 2 and set(everything.by_symptom) == {"cuda_oom", "nccl_timeout"}
    assert one.total == 1 and set(one.by_symptom) == {"nccl_timeout"}
