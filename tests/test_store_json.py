"""The store masks values, never serialised JSON text (a rule run over json.dumps output ate a JSON escape and left
invalid JSON behind), and one damaged row never takes down a report, a vote or a corpus export."""
import json
import os
import sqlite3
import subprocess
import sys
from datetime import datetime, timedelta, timezone

from conftest import FIXTURES, ROOT

OOM = (FIXTURES / "cuda_oom" / "new_format_fragmented.log").read_text()
# the line: a subprocess error quoting a command with a key, the quote right after it
WANDB = ("subprocess.CalledProcessError: Command '\"wandb login --api-key 0123456789abcdef0123\"' returned non-zero "
         "exit status 1.\n")


def test_a_secret_beside_a_quote_is_masked_and_the_row_stays_valid_json(run, tmp_path):
    from bot.store.store import Store
    d = run(WANDB + OOM)
    assert any("wandb login" in e.text for f in d.findings for e in f.evidence) or \
        any("wandb login" in u["example"] for u in d.unclaimed)
    store = Store(tmp_path / "s.db")
    did = store.record(d, (WANDB + OOM).encode())
    for row in store.db.query("select diagnosis_json from diagnoses"):
        assert "0123456789abcdef0123" not in row["diagnosis_json"]
        json.loads(row["diagnosis_json"])
    for row in store.db.query("select facts_json from findings"):
        json.loads(row["facts_json"])
    assert store.diagnosis(did).findings[0].symptom == "cuda_oom"


def _damage(db_path, did: int) -> None:
    """What a row written by the old masker looks like: a JSON string whose escape was swallowed."""
    with sqlite3.connect(db_path) as c:
        c.execute("update diagnoses set diagnosis_json = ? where id = ?",
                  ['{"findings": [{"evidence": [{"text": "--api-key <PASSWORD>"\' returned"}]}]}', did])


def test_a_damaged_row_is_skipped_with_a_note_by_report_vote_and_export(run, tmp_path):
    from bot import report
    from bot.cli.corpus import feedback_cases
    from bot.store.store import Store
    store = Store(tmp_path / "s.db")
    good = store.record(run(OOM), OOM.encode(), job_key="job-a")
    bad = store.record(run(OOM), OOM.encode(), job_key="job-a")
    store.vote(good, "U1", "down", "nccl_error")
    store.vote(bad, "U2", "down", "nccl_error")
    _damage(tmp_path / "s.db", bad)
    now = datetime.now(timezone.utc)
    rep = report.make(store, now - timedelta(days=7), now + timedelta(minutes=1), tmp_path / "out")
    md = rep.markdown_path.read_text()
    assert rep.data.unreadable == [bad] and f"could not be read" in md and f"#{bad}" in md
    assert rep.data.total == 2 and "cuda_oom" in md
    assert store.diagnosis(bad) is None and store.diagnosis(good) is not None
    cases = list(feedback_cases(store))
    assert [c["id"] for c in cases] == [f"feedback-{good}"]


def test_report_and_corpus_export_commands_survive_a_damaged_row(run, tmp_path):
    from bot.store.store import Store
    db = tmp_path / "c.db"
    store = Store(db)
    did = store.record(run(OOM), OOM.encode())
    store.vote(did, "U1", "down", "nccl_error")
    _damage(db, did)
    env = {**os.environ, "TRIAGE_DB": str(db)}
    r = subprocess.run([sys.executable, "-m", "bot.cli", "report", "--out", str(tmp_path / "rep")],
                       capture_output=True, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr.decode()
    assert "Traceback" not in r.stderr.decode() and "could not be read" in (tmp_path / "rep" / "report.md").read_text()
    r = subprocess.run([sys.executable, "-m", "bot.cli", "corpus", "export", "--feedback"], capture_output=True,
                       cwd=ROOT, env=env)
    assert r.returncode == 0 and r.stdout == b"" and b"Traceback" not in r.stderr
