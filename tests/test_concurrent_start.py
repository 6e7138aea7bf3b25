"""Several processes opening one fresh database at the same moment (`triage serve` replicas, `watch` sidecars, a
burst of `diagnose --record`) all start: WAL mode and the migrations are set up once, under a write lock the others
wait for, never 'database is locked' or 'table already exists'."""
import os
import subprocess
import sys
import time

from conftest import FIXTURES, ROOT

GATED = """
import os, sys, time
sys.path.insert(0, {root!r})
from bot.cli.entry import main
while not os.path.exists(sys.argv[1]):
    time.sleep(0.002)
sys.exit(main(["diagnose", "--record", sys.argv[2]]))
"""


def test_twelve_processes_on_one_fresh_database_all_start_and_record(tmp_path):
    log = FIXTURES / "gpu_xid" / "xid79.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "TRIAGE_"))}
    for trial in range(3):
        db, gate = tmp_path / f"t{trial}.db", tmp_path / f"go{trial}"
        code = GATED.format(root=str(ROOT))
        procs = [subprocess.Popen([sys.executable, "-c", code, str(gate), str(log)], cwd=ROOT,
                                  env={**env, "TRIAGE_DB": str(db)}, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True) for _ in range(12)]
        time.sleep(3)   # every process imported and waiting at the gate
        gate.touch()
        errors = [p.communicate(timeout=120)[1] for p in procs]
        assert [p.returncode for p in procs] == [0] * 12, [e for e in errors if e][:2]
        assert not any("locked" in e or "not stored" in e for e in errors), errors
        import sqlite3
        assert sqlite3.connect(str(db)).execute("select count(*) from diagnoses").fetchone() == (12,)
