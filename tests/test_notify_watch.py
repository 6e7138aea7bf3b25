"""Issue 18: triage before anyone asks — `triage notify`, `triage watch` and the Slurm epilog, through the real CLI
and the real Slack Web API client against the local fake Slack."""
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from conftest import FIXTURES, ROOT

OOM = FIXTURES / "cuda_oom" / "new_format_fragmented.log"
HEALTHY = FIXTURES / "healthy" / "hf_dicts_steady.log"


@pytest.fixture
def fake():
    from testkit.fakeslack import FakeSlack
    f = FakeSlack().start()
    yield f
    f.stop()


def triage(fake, tmp_path, *args, env=None):
    full = {**os.environ, "SLACK_BOT_TOKEN": "xoxb-test-token", "SLACK_API_BASE_URL": fake.api,
            "TRIAGE_DB": str(tmp_path / "t.db"), "TRIAGE_CACHE_DIR": str(tmp_path / "cache"), **(env or {})}
    full.pop("TRIAGE_LLM", None)
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env=full, timeout=120)


def posts(fake):
    return [p for m, p in fake.calls if m == "chat.postMessage"]


def blocks_of(post):
    b = post["blocks"]
    return json.loads(b) if isinstance(b, str) else b


def test_notify_posts_the_diagnosis_with_feedback_buttons_and_later_runs_of_the_job_go_in_its_thread(fake, tmp_path):
    out = triage(fake, tmp_path, "notify", "--channel", "C9", "--job", "4242", "--exit-code", "1", str(OOM))
    assert out.returncode == 0, out.stderr
    assert "posted diagnosis #1 to C9" in out.stdout
    first = posts(fake)
    assert len(first) == 1 and first[0]["channel"] == "C9" and not first[0].get("thread_ts")
    blocks = blocks_of(first[0])
    assert blocks[0]["elements"][0]["text"].startswith("Job 4242 finished with exit code 1: cuda_oom (1 log file(s))")
    assert any(b["type"] == "header" for b in blocks)
    assert any(b["type"] == "actions" for b in blocks)       # the same 👍/👎 as /diagnose
    from bot.store.store import Store
    row = Store(tmp_path / "t.db").get(1)
    assert (row["source"], row["job_key"], row["channel"], row["top_symptom"]) == ("notify", "4242", "C9", "cuda_oom")
    again = triage(fake, tmp_path, "notify", "--channel", "C9", "--job", "4242", "--exit-code", "1", str(OOM))
    assert again.returncode == 0
    assert posts(fake)[-1]["thread_ts"] == fake.posted[0]["ts"]   # one thread per job
    assert Store(tmp_path / "t.db").get(2)["message_ts"] != ""


def test_only_failures_and_a_clean_exit_post_nothing_but_a_failed_exit_always_posts(fake, tmp_path):
    quiet = triage(fake, tmp_path, "notify", "--channel", "C9", "--only-failures", str(HEALTHY))
    clean = triage(fake, tmp_path, "notify", "--channel", "C9", "--exit-code", "0", str(HEALTHY))
    assert quiet.returncode == clean.returncode == 0 and posts(fake) == []
    assert "nothing posted" in quiet.stdout and "exit code 0" in clean.stdout
    failed = triage(fake, tmp_path, "notify", "--channel", "C9", "--job", "77", "--exit-code", "137", str(HEALTHY))
    assert failed.returncode == 0
    blocks = blocks_of(posts(fake)[0])
    head = blocks[0]["elements"][0]["text"]
    assert head.startswith("Job 77 finished with exit code 137 (SIGKILL: the kernel's OOM killer, or a cancel or time "
                           "limit that escalated): no known failure in its logs")
    # a job that exited non-zero never gets the green tick, nor "looks healthy"
    body = json.dumps(blocks[1:])
    assert "white_check_mark" not in body and "looks healthy" not in body
    assert ":x: The job failed with exit code 137 (SIGKILL" in body


def test_exit_statuses_name_their_signal_and_plain_codes_stay_plain():
    from bot.proactive.notify import exit_text
    assert exit_text(143) == " with exit code 143 (SIGTERM: cancelled, preempted or out of time)"
    assert exit_text(134).endswith("(SIGABRT: aborted, e.g. by the NCCL watchdog)")
    assert exit_text(1) == " with exit code 1" and exit_text(255) == " with exit code 255"
    assert "SIGKILL" in exit_text(137, "ko") and "종료 코드 137" in exit_text(137, "ko")


def test_notify_bad_input_and_missing_token_are_one_line_and_exit_2(fake, tmp_path):
    missing = triage(fake, tmp_path, "notify", "--channel", "C9", str(tmp_path / "nope.log"))
    assert missing.returncode == 2 and "Traceback" not in missing.stderr and posts(fake) == []
    no_token = triage(fake, tmp_path, "notify", "--channel", "C9", str(OOM), env={"SLACK_BOT_TOKEN": ""})
    assert no_token.returncode == 2 and "SLACK_BOT_TOKEN" in no_token.stderr


def test_a_refused_post_is_one_line_and_a_slack_outage_is_queued_not_lost(fake, tmp_path):
    fake.fail["chat.postMessage"] = (200, {"ok": False, "error": "not_in_channel"})
    refused = triage(fake, tmp_path, "notify", "--channel", "C9", str(OOM))
    assert refused.returncode == 1 and "not_in_channel" in refused.stderr and "Traceback" not in refused.stderr
    fake.fail["chat.postMessage"] = (503, {"ok": False, "error": "service_unavailable"})
    down = triage(fake, tmp_path, "notify", "--channel", "C9", str(OOM))
    assert down.returncode == 0 and "waits in the outbox" in down.stdout
    from bot.store.store import Store
    pending = Store(tmp_path / "t.db").db.query("select status from outbox")
    assert [r["status"] for r in pending] == ["pending"]


def test_notify_masks_secrets_and_escapes_what_it_posts(fake, tmp_path):
    log = tmp_path / "slurm-31337.out"
    log.write_text(OOM.read_text() + "export HF_TOKEN=hf_abcdefghijklmnopqrstuvwxyz0123456789\n")
    out = triage(fake, tmp_path, "notify", "--channel", "C9", "--job", "<!channel> 9", str(log))
    assert out.returncode == 0
    sent = json.dumps(posts(fake)[0])
    assert "hf_abcdefghijklmnopqrstuvwxyz0123456789" not in sent
    assert "<!channel>" not in sent and "&lt;!channel&gt; 9" in sent


def make_job(root, name, text, age_s):
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    old = time.time() - age_s
    os.utime(path, (old, old))
    return path


def test_watch_posts_each_settled_failed_job_once_across_restarts(fake, tmp_path):
    logs = tmp_path / "logs"
    make_job(logs, "job-a/rank0.log", OOM.read_text(), 600)           # settled, failed
    make_job(logs, "job-a/rank1.log", HEALTHY.read_text(), 600)
    make_job(logs, "job-b/train.log", HEALTHY.read_text(), 600)       # settled, healthy
    make_job(logs, "slurm-555.out", OOM.read_text(), 5)               # still being written
    make_job(logs, "old/train.log", OOM.read_text(), 3 * 86400)       # older than --max-age
    first = triage(fake, tmp_path, "watch", str(logs), "--channel", "C9", "--settle", "60s", "--once")
    assert first.returncode == 0, first.stderr
    assert [blocks_of(p)[0]["elements"][0]["text"].split(":")[0] for p in posts(fake)] == ["Job job-a finished"]
    assert "job-b: clean" in first.stdout and "slurm:555" not in first.stdout and "old" not in first.stdout
    # a restart: job-a is not posted again; the Slurm job has since settled and is posted under its job id
    os.utime(logs / "slurm-555.out", (time.time() - 120, time.time() - 120))
    second = triage(fake, tmp_path, "watch", str(logs), "--channel", "C9", "--settle", "60s", "--once")
    assert second.returncode == 0 and "job-a" not in second.stdout and "job-b" not in second.stdout
    assert len(posts(fake)) == 2 and "Job slurm:555 finished" in blocks_of(posts(fake)[1])[0]["elements"][0]["text"]
    # the quiet job fails later: its files changed, so it is read again and posted
    make_job(logs, "job-b/train.log", HEALTHY.read_text() + OOM.read_text(), 300)
    third = triage(fake, tmp_path, "watch", str(logs), "--channel", "C9", "--once")
    assert "job-b: posted" in third.stdout and len(posts(fake)) == 3


def test_watch_refuses_a_missing_directory_and_a_bad_duration(fake, tmp_path):
    gone = triage(fake, tmp_path, "watch", str(tmp_path / "nope"), "--channel", "C9", "--once")
    bad = triage(fake, tmp_path, "watch", str(tmp_path), "--channel", "C9", "--settle", "soon", "--once")
    assert gone.returncode == bad.returncode == 2
    assert "not a directory" in gone.stderr and "60s" in bad.stderr


def test_watch_groups_jobs_by_folder_and_slurm_id():
    from bot.proactive.watch import duration, jobs_in
    assert duration("90") == 90 and duration("2m") == 120 and duration("1.5h") == 5400
    jobs = jobs_in(str(FIXTURES / "cuda_oom"))
    assert set(jobs) == {p.stem for p in (FIXTURES / "cuda_oom").glob("*.log")}   # .json files are not logs


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_slurm_epilog_notifies_failed_jobs_only(fake, tmp_path):
    """examples/slurm/triage-epilog.sh with a stand-in `scontrol` that prints what the real one prints."""
    out_file = tmp_path / "slurm-8123.out"
    out_file.write_text(OOM.read_text())
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\necho 'JobId=8123 JobName=pretrain'\n"
        f"echo '   WorkDir={tmp_path}'\n"
        f"echo '   StdErr={out_file}'\necho '   StdIn=/dev/null'\necho '   StdOut={out_file}'\n")
    (bin_dir / "scontrol").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "SLACK_BOT_TOKEN": "xoxb-test-token",
           "SLACK_API_BASE_URL": fake.api, "TRIAGE_DB": str(tmp_path / "t.db"),
           "TRIAGE_CACHE_DIR": str(tmp_path / "cache"), "TRIAGE_NOTIFY_CHANNEL": "C7",
           "TRIAGE": f"{sys.executable} -m bot.cli", "TRIAGE_EPILOG_WAIT": "1", "SLURM_JOB_ID": "8123"}
    script = str(ROOT / "examples" / "slurm" / "triage-epilog.sh")
    ok = subprocess.run(["bash", script], cwd=ROOT, env={**env, "SLURM_JOB_EXIT_CODE2": "0:0"}, timeout=120)
    assert ok.returncode == 0 and posts(fake) == []
    failed = subprocess.run(["bash", script], cwd=ROOT, env={**env, "SLURM_JOB_EXIT_CODE2": "1:0"}, timeout=120)
    assert failed.returncode == 0   # an epilog must never fail the job's clean-up
    fake.wait_calls("chat.postMessage")
    head = blocks_of(posts(fake)[0])[0]["elements"][0]["text"]
    assert posts(fake)[0]["channel"] == "C7" and head.startswith("Job 8123 finished with exit code 1: cuda_oom")
    killed = subprocess.run(["bash", script], cwd=ROOT, env={**env, "SLURM_JOB_EXIT_CODE": "9"}, timeout=120)
    assert killed.returncode == 0   # the wait() status of a SIGKILLed batch script: 128 + 9, in the job's thread
    second = posts(fake)[1]
    assert "exit code 137" in blocks_of(second)[0]["elements"][0]["text"] and second["thread_ts"] == fake.posted[0]["ts"]


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_the_epilog_reads_only_the_real_output_fields_of_the_jobs_own_user(fake, tmp_path):
    """Issue 31 item 14: a Comment= that names another file, a file of another user and a symlink are never read."""
    import getpass
    me = getpass.getuser()
    real, planted = tmp_path / "slurm-8124.out", tmp_path / "other-users-secret.log"
    real.write_text(OOM.read_text())
    planted.write_text(OOM.read_text())
    link = tmp_path / "link.out"
    link.symlink_to(planted)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\necho 'JobId=8124 JobName=pretrain'\n"
        f"echo '   UserId={me}(1000) GroupId={me}(1000) MCS_label=N/A'\n"
        f"echo '   Comment=see StdOut={planted} for details'\n"
        f"echo '   StdErr={link}'\necho '   StdOut={real}'\n")
    (bin_dir / "scontrol").chmod(0o755)
    captured = tmp_path / "args"
    (bin_dir / "triage-stand-in").write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {captured}\n')
    (bin_dir / "triage-stand-in").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "TRIAGE_NOTIFY_CHANNEL": "C7",
           "TRIAGE": str(bin_dir / "triage-stand-in"),
           "TRIAGE_EPILOG_WAIT": "1", "SLURM_JOB_ID": "8124", "SLURM_JOB_EXIT_CODE2": "1:0"}
    subprocess.run(["bash", str(ROOT / "examples" / "slurm" / "triage-epilog.sh")], cwd=ROOT, env=env, timeout=60)
    args = captured.read_text().splitlines()
    assert str(real) in args and str(planted) not in args and str(link) not in args
    # a file the job's user does not own is skipped: the same job claimed by another user reads nothing
    captured.unlink()
    (bin_dir / "scontrol").write_text((bin_dir / "scontrol").read_text().replace(f"UserId={me}(", "UserId=someone-else("))
    subprocess.run(["bash", str(ROOT / "examples" / "slurm" / "triage-epilog.sh")], cwd=ROOT, env=env, timeout=60)
    assert not captured.exists()


def test_a_failing_watch_pass_is_said_and_the_next_one_runs(capsys):
    import threading

    from bot.proactive.watch import Watcher
    calls, stop = [], threading.Event()

    class Flaky(Watcher):
        def scan(self, at=None):
            calls.append(1)
            if len(calls) == 1:
                raise OSError("mount gone")
            stop.set()
            return []
    Flaky("/tmp", notifier=type("N", (), {"channel": "C9"})()).run(stop, 0.01)
    assert len(calls) == 2 and "watch pass failed (OSError: mount gone); retrying" in capsys.readouterr().err


def test_watch_never_reads_through_a_symbolic_link_out_of_its_directory(tmp_path):
    """Issue 31 item 14, watch part: a job folder holding a link to another user's file (or to /proc, a device) is
    not read; a link that stays inside the watched directory is; --follow-symlinks is the operator's opt-in."""
    from bot.proactive.watch import jobs_in
    root, outside = tmp_path / "jobs", tmp_path / "elsewhere"
    (root / "job-a").mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.log").write_text("someone else's log\n")
    (root / "job-a" / "rank0.log").symlink_to(outside / "secret.log")
    (root / "job-b").mkdir()
    (root / "job-b" / "rank0.log").write_text("ok\n")
    (root / "job-b" / "rank1.log").symlink_to(root / "job-b" / "rank0.log")
    (root / "slurm-77.out").symlink_to(outside / "secret.log")
    jobs = jobs_in(str(root))
    assert set(jobs) == {"job-b"} and len(jobs["job-b"]) == 2
    assert set(jobs_in(str(root), follow_links=True)) == {"job-a", "job-b", "slurm:77"}
