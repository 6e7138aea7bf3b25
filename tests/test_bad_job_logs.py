"""One bad job log never aborts a `triage watch` pass: a file whose read fails with EIO or a 20 000-deep nested
JSON line is that job's failure (recorded, said on stderr), every other job is still posted, and `--once` exits 1.
Nested JSON is read with a depth limit: `triage diagnose` and `/diagnose` read such a line as text."""
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import FIXTURES, ROOT

OOM = (FIXTURES / "cuda_oom" / "new_format_fragmented.log").read_text()
DEEP = "[" * 20000 + "]" * 20000
JSON_LOG = "".join(json.dumps({"log": line, "stream": "stderr"}) + "\n" for line in OOM.splitlines())


def _deep_json_log() -> str:
    """A container log (one JSON object per line) with one line nested 20 000 deep in the middle."""
    lines = JSON_LOG.splitlines()
    return "\n".join(lines[:3] + ['{"log": ' + DEEP + "}"] + lines[3:]) + "\n"


def _notifier(fake, tmp_path):
    from bot.proactive.notify import Notifier
    from bot.settings import Settings
    from bot.wiring import store
    settings = Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-t", "SLACK_API_BASE_URL": fake.api,
                                  "TRIAGE_DB": str(tmp_path / "w.db"), "TRIAGE_CACHE_DIR": str(tmp_path / "c")})
    return Notifier(settings, store(settings), "C9")


@pytest.fixture
def fake():
    from testkit.fakeslack import FakeSlack
    f = FakeSlack().start()
    yield f
    f.stop()


def _eio(path) -> None:
    """A log file whose every read fails with EIO: this process' memory at address 0, read by a child (the CLI) or
    by this process. Its mtime is fixed when first looked at, so it settles like a real file."""
    mem = f"/proc/{os.getpid()}/mem"
    os.stat(mem)
    path.symlink_to(mem)
    # A child may read its parent's memory only where ptrace allows it (Yama ptrace_scope 0, or root with
    # CAP_SYS_PTRACE); elsewhere the read is refused, not an I/O error, and these tests cannot make one.
    probe = subprocess.run([sys.executable, "-c", f"open({str(path)!r}, 'rb').read(1)"], capture_output=True, text=True)
    if "Input/output error" not in probe.stderr:
        pytest.skip("this machine does not let a child read its parent's memory: no EIO file can be made here")


def test_a_file_that_fails_with_eio_is_that_jobs_failure_and_the_pass_goes_on(fake, tmp_path):
    from bot.proactive.watch import JobFailed, Watcher
    root = tmp_path / "jobs"
    (root / "job-a").mkdir(parents=True)
    _eio(root / "job-a" / "rank0.log")
    (root / "job-b").mkdir()
    (root / "job-b" / "rank0.log").write_text(_deep_json_log())
    (root / "job-c").mkdir()
    (root / "job-c" / "rank0.log").write_text(OOM)
    w = Watcher(str(root), _notifier(fake, tmp_path), settle=60, max_age=86400, follow_links=True)
    out = dict(w.scan(at=time.time() + 120))
    assert set(out) == {"job-a", "job-b", "job-c"}
    assert isinstance(out["job-a"], JobFailed) and "Input/output error" in out["job-a"]
    assert not isinstance(out["job-b"], JobFailed) and not isinstance(out["job-c"], JobFailed)
    assert len(fake.called("chat.postMessage")) == 2              # job-b's and job-c's OOMs, both posted
    assert w._seen("job-a")["status"] == "failed"
    assert dict(w.scan(at=time.time() + 150)) == {}               # recorded: not retried until its files change


def test_watch_once_posts_every_other_job_and_exits_1_when_one_failed(fake, tmp_path):
    root = tmp_path / "jobs"
    (root / "job-a").mkdir(parents=True)
    _eio(root / "job-a" / "rank0.log")
    (root / "job-b").mkdir()
    (root / "job-b" / "rank0.log").write_text(_deep_json_log())
    (root / "job-c").mkdir()
    (root / "job-c" / "rank0.log").write_text(OOM)
    time.sleep(1.1)
    env = {**os.environ, "SLACK_BOT_TOKEN": "xoxb-t", "SLACK_API_BASE_URL": fake.api,
           "TRIAGE_DB": str(tmp_path / "w.db"), "TRIAGE_CACHE_DIR": str(tmp_path / "c")}
    env.pop("TRIAGE_LLM", None)
    cmd = [sys.executable, "-m", "bot.cli", "watch", str(root), "--channel", "C9", "--once", "--settle", "1s",
           "--follow-symlinks"]   # the EIO file is a link to /proc: read only when the operator allows it
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert "Traceback" not in r.stderr and "watch pass failed" not in r.stderr
    assert "job-a: failed" in r.stderr and r.returncode == 1
    assert "job-b: posted diagnosis" in r.stdout and "job-c: posted diagnosis" in r.stdout
    assert len(fake.called("chat.postMessage")) == 2
    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and again.stdout == ""         # nothing new: the failure is not said twice


def test_diagnose_reads_a_deeply_nested_json_line_as_text(tmp_path):
    p = tmp_path / "deep.log"
    p.write_text(_deep_json_log())
    r = subprocess.run([sys.executable, "-m", "bot.cli", "diagnose", "--json", str(p)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "RecursionError" not in r.stderr
    assert json.loads(r.stdout)["findings"][0]["symptom"] == "cuda_oom"


def test_slash_diagnose_answers_a_paste_with_a_deeply_nested_json_line(slack_bot):
    h = slack_bot()
    h.slash(_deep_json_log()[:30000])
    resp = h.fake.wait(lambda: h.fake.responses)[0]
    assert "cuda_oom" in json.dumps(resp) or "CUDA" in json.dumps(resp)


def test_the_depth_limit_keeps_ordinary_json_lines():
    from core.ingest import json_line
    assert json_line(b'{"log": "a [[[ b {{{", "n": [[1], [2]]}') == {"log": "a [[[ b {{{", "n": [[1], [2]]}
    assert json_line(("[" * 65 + "]" * 65).encode()) is None and json_line(DEEP) is None
    assert json_line("[" * 60 + "]" * 60) is not None


def test_diagnose_says_one_line_for_a_file_that_fails_with_eio_and_reads_the_others(tmp_path):
    bad, good = tmp_path / "bad.log", tmp_path / "good.log"
    _eio(bad)
    good.write_text(OOM)
    r = subprocess.run([sys.executable, "-m", "bot.cli", "diagnose", str(bad), str(good)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == "triage: bad.log: cannot read (Input/output error)" and "CUDA" in r.stdout
