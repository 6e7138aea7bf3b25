"""Bad arguments and bad places get one line on stderr and exit code 2, never a traceback (issue 31, item 17; the
EIO and nested-JSON cases are in test_bad_job_logs.py)."""
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    d = tmp_path_factory.mktemp("one-line")
    env = {**os.environ, "TRIAGE_DB": str(d / "t.db")}
    subprocess.run([sys.executable, "-m", "bot.cli", "diagnose", "--record",
                    str(FIXTURES / "cuda_oom" / "megatron_args_oom.log")], cwd=ROOT, env=env, capture_output=True,
                   check=True)
    (d / "a-file").write_text("x")
    return d


@pytest.mark.parametrize("args,said", [
    (["report", "--out", "{d}/a-file"], "--out"),
    (["report", "--since", "999999999d", "--out", "{d}/rep"], "999999999d"),
    (["corpus", "export", "--feedback", "--since", "99999999999w"], "99999999999w"),
    (["rules", "new", "--from-unclaimed", "99999999999999999999999", "--dir", "{d}/rules"], "99999999999999999999999"),
    (["rules", "new", "--from-unclaimed", "-5"], "-5"),
])
def test_one_line_and_exit_2(db, args, said):
    env = {**os.environ, "TRIAGE_DB": str(db / "t.db")}
    r = subprocess.run([sys.executable, "-m", "bot.cli", *[a.format(d=db) for a in args]], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("triage: ") and said in lines[0], r.stderr
