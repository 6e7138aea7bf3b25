"""`triage fleet`: 200 generated jobs (symptom fixtures and healthy runs, one or two files each, Slurm pairs) plus
a corrupt archive, read on a local Ray (started once for the module) from a directory and from a moto S3 server
on a free loopback port; the same answers as `triage diagnose --together` per job; --record once per signature;
the weekly report's fleet section; the message when Ray is missing."""
import contextlib
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import zipfile

import pytest

from conftest import FIXTURES, ROOT

pytestmark = pytest.mark.xdist_group("fleet")   # one Ray and one S3 server for the module (make test: loadgroup)
JOBS = 200
SECRET = "fleet-test-secret-key-never-printed"


def _sources() -> tuple[list, list]:
    """(fixture logs that show a symptom, healthy ones)."""
    sick = sorted(p for p in FIXTURES.rglob("*.log") if p.with_suffix(".expected.json").exists())
    return sick, sorted((FIXTURES / "healthy").glob("*.log"))


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory):
    """200 jobs: sub-directories of one or two files (a failure and a healthy neighbour, or healthy alone) and
    top-level Slurm pairs, plus a corrupt zip and a job last touched 30 days ago."""
    root = tmp_path_factory.mktemp("fleet") / "logs"
    root.mkdir()
    sick, healthy = _sources()
    for i in range(JOBS - 10):
        job = root / f"job-{i:03d}"
        job.mkdir()
        picks = [sick[i % len(sick)]] if i % 3 else [healthy[i % len(healthy)]]
        if i % 4 == 1:
            picks.append(healthy[(i // 4) % len(healthy)])
        for n, p in enumerate(picks):
            shutil.copy(p, job / f"node{n}-{p.name}")
    for i in range(10):   # Slurm's own naming: slurm-ID.out and slurm-ID.err, one job
        shutil.copy(sick[(7 * i) % len(sick)], root / f"slurm-{5000 + i}.out")
        shutil.copy(healthy[i % len(healthy)], root / f"slurm-{5000 + i}.err")
    (root / "corrupt.zip").write_bytes(b"PK\x03\x04" + os.urandom(200))
    with tarfile.open(root / "job-010" / "ranks.tar.gz", "w:gz") as tar:   # archives inside a job: read as members
        tar.add(sick[3], arcname="rank3.log")
    with zipfile.ZipFile(root / "job-020" / "more.zip", "w") as zf:
        zf.write(healthy[2], arcname="rank9.log")
    old = root / "job-old"
    old.mkdir()
    shutil.copy(sick[0], old / "rank0.log")
    month = time.time() - 30 * 86400
    os.utime(old / "rank0.log", (month, month))
    return root


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3(fleet_dir):
    """A moto S3 server on a free loopback port holding the same files under s3://fleet/logs/, one object archived
    to Glacier (unreadable without a restore). Credentials from the environment, as the AWS chain reads them."""
    from moto.server import ThreadedMotoServer
    env = {"AWS_ACCESS_KEY_ID": "AKIAFLEETTEST", "AWS_SECRET_ACCESS_KEY": SECRET, "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    import boto3
    client = boto3.client("s3", endpoint_url=endpoint)
    client.create_bucket(Bucket="fleet")
    for path in sorted(fleet_dir.rglob("*")):
        if path.is_file() and path.parent.name != "job-old":
            client.upload_file(str(path), "fleet", f"logs/{path.relative_to(fleet_dir)}")
    client.put_object(Bucket="fleet", Key="logs/cold-job/rank0.log", Body=b"NCCL WARN x\n", StorageClass="GLACIER")
    yield endpoint
    server.stop()
    for k, v in saved.items():
        os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


@pytest.fixture(scope="module")
def ray_local(s3):
    """Ray started once for the module (after the S3 credentials are in the environment its workers inherit)."""
    import ray
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def _triage(*argv, env=None) -> tuple[int, str, str]:
    from bot.cli.entry import main
    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    return code, out.getvalue(), err.getvalue()


def _rows(text: str) -> dict[str, dict]:
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    by_job = {r["fleet"]["job"]: r for r in rows}
    assert len(by_job) == len(rows), "a job came back twice"
    return by_job


def _answer(doc: dict) -> list:
    """What must agree with `triage diagnose --together`: symptoms, rules, titles, evidence lines and texts."""
    return [(f["symptom"], f["rule"], f["title"], [(e["line"], e["text"]) for e in f["evidence"]])
            for f in doc.get("findings", [])]


@pytest.fixture(scope="module")
def dir_run(fleet_dir, ray_local, tmp_path_factory):
    db = tmp_path_factory.mktemp("db") / "t.db"
    env = {"TRIAGE_DB": str(db)}
    code, out, err = _triage("fleet", str(fleet_dir), "--since", "7d", "--record", env=env)
    return code, _rows(out), err, env


def test_every_job_is_read_once_on_ray_and_bad_ones_become_rows(dir_run):
    code, rows, err, _ = dir_run
    assert code == 0, err   # an unreadable archive is not a failure of the run
    assert len(rows) == JOBS + 1 and "job-old" not in rows   # 200 jobs + the corrupt zip; the old one skipped
    assert rows["corrupt"]["fleet"]["status"] == "unreadable" and "zip" in rows["corrupt"]["fleet"]["error"]
    statuses = {r["fleet"]["status"] for r in rows.values()}
    assert {"diagnosed", "clean", "unreadable"} <= statuses
    assert rows["slurm:5003"]["input"]["parts"][1]["name"] == "slurm-5003.out"   # the pair read as one job
    parts = {job: [x["name"] for x in rows[job]["input"]["parts"]] for job in ("job-010", "job-020")}
    assert "job-010/ranks.tar.gz:rank3.log" in parts["job-010"] and "job-020/more.zip:rank9.log" in parts["job-020"]
    assert all(r["schema"] == "triage.diagnosis/v1" for r in rows.values() if r["fleet"]["status"] != "unreadable")
    assert f"triage fleet: {JOBS + 1} job(s) read" in err and "findings by symptom:" in err
    assert "older than --since" in err and "unreadable (not a log)" in err


def test_each_job_gets_the_answer_diagnose_together_gives(dir_run, fleet_dir):
    _, rows, _, _ = dir_run
    checked = 0
    for job, row in sorted(rows.items()):
        if row["fleet"]["status"] == "unreadable":
            continue
        files = (sorted(str(p) for p in (fleet_dir / job).iterdir()) if (fleet_dir / job).is_dir() else
                 [str(fleet_dir / f"slurm-{job.split(':')[1]}.{x}") for x in ("err", "out")])
        code, out, err = _triage("diagnose", "--together", "--json", *files)
        assert code == 0, err
        assert _answer(row) == _answer(json.loads(out)), job
        checked += 1
    assert checked == JOBS


def test_a_rerun_records_nothing_new_and_the_store_holds_each_job_once(dir_run, fleet_dir):
    from bot.store.store import Store
    _, rows, _, env = dir_run
    store = Store(env["TRIAGE_DB"])
    before = store.db["diagnoses"].count
    assert before == JOBS and store.db["fleet"].count == JOBS + 1   # the unreadable zip is remembered, not stored
    code, out, err = _triage("fleet", str(fleet_dir), "--since", "7d", "--record", "--jobs", "2", env=env)
    assert code == 0 and out == "" and store.db["diagnoses"].count == before
    assert re.search(rf"skipped \(recorded, unchanged\) +{JOBS + 1}\n", err), err
    touched = fleet_dir / "job-005" / sorted(os.listdir(fleet_dir / "job-005"))[0]
    touched.write_text(touched.read_text() + "one more line\n")   # a job whose files changed is read again
    code, out, err = _triage("fleet", str(fleet_dir), "--since", "7d", "--record", "--jobs", "1", env=env)
    assert list(_rows(out)) == ["job-005"] and store.db["diagnoses"].count == before + 1


def test_s3_gives_the_same_answers_and_an_unreadable_object_fails_alone(dir_run, s3):
    _, local, _, _ = dir_run
    code, out, err = _triage("fleet", "s3://fleet/logs/", "--s3-endpoint", s3, "--workers", "2")
    rows = _rows(out)
    assert code == 1   # the Glacier object: a failed job, every other job read
    assert rows["cold-job"]["fleet"]["status"] == "failed" and "InvalidObjectState" in rows["cold-job"]["fleet"]["error"]
    assert set(rows) == set(local) | {"cold-job"}
    assert all(_answer(rows[j]) == _answer(local[j]) and rows[j]["fleet"]["status"] == local[j]["fleet"]["status"]
               for j in local)
    assert "job-010/ranks.tar.gz:rank3.log" in [x["name"] for x in rows["job-010"]["input"]["parts"]]
    assert SECRET not in out + err and "AKIAFLEETTEST" not in out + err


def test_aws_endpoint_url_is_honoured_and_local_processes_read_s3_too(s3, ray_local, tmp_path):
    code, out, err = _triage("fleet", "s3://fleet/logs", "--jobs", "2", "--out", str(tmp_path / "r.jsonl"),
                             env={"AWS_ENDPOINT_URL": s3})
    assert len(_rows((tmp_path / "r.jsonl").read_text())) == JOBS + 2 and "job(s) read" in out


def test_a_job_past_its_time_limit_and_a_missing_source_are_rows_not_crashes(fleet_dir, tmp_path):
    small = tmp_path / "small"
    shutil.copytree(fleet_dir / "job-001", small / "job-001")
    code, out, err = _triage("fleet", str(small), str(tmp_path / "nowhere-*"), "--jobs", "1", "--timeout", "0")
    rows = [json.loads(line)["fleet"] for line in out.splitlines()]
    assert code == 1
    assert {r["job"]: r["status"] for r in rows} == {"job-001": "failed", "": "failed"}
    assert "timed out" in rows[0]["error"] and "no directory or file matches" in rows[1]["error"]


def test_without_ray_it_says_how_to_install_the_extra_and_exits_2(fleet_dir):
    code = ("import sys; sys.modules['ray'] = None; sys.modules['ray.data'] = None\n"
            "from bot.cli.entry import main; sys.exit(main(['fleet', sys.argv[1]]))")
    r = subprocess.run([sys.executable, "-c", code, str(fleet_dir)], capture_output=True, text=True, cwd=ROOT,
                       timeout=120)
    assert r.returncode == 2 and "pip install '.[fleet]'" in r.stderr and "--jobs N" in r.stderr
    r = subprocess.run([sys.executable, "-c", code.replace("'fleet', sys.argv[1]", "'fleet', sys.argv[1], '--jobs', '2'"),
                        str(fleet_dir / "job-001")], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0 and '"status": "diagnosed"' in r.stdout   # --jobs N: this machine, no Ray needed


def test_progress_and_the_summary_table():
    from bot.fleet.fleet import Fleet
    out, err = io.StringIO(), io.StringIO()
    fleet = Fleet(out, progress=True)
    fleet.listed, fleet.listing = 4, False
    with contextlib.redirect_stderr(err):
        fleet.take({"source": "s", "job": "a", "status": "failed", "error": "a.log: cannot read (EIO)", "doc": ""})
        fleet.take({"source": "s", "job": "b", "status": "clean", "error": "", "doc": "", "bytes": 10})
    assert "2/4 jobs" in err.getvalue() and "jobs/s" in err.getvalue() and "ETA" in err.getvalue()
    table = fleet.summary("Ray (local)")
    assert "failed jobs" in table and "healthy (nothing found)" in table and "Ray (local)" in table
    assert json.loads(out.getvalue().splitlines()[0])["fleet"]["error"] == "a.log: cannot read (EIO)"


def test_the_weekly_report_gains_a_fleet_section(fleet_dir, tmp_path):
    from datetime import datetime, timedelta, timezone

    from bot import report
    from bot.store.store import Store
    env = {"TRIAGE_DB": str(tmp_path / "report.db")}   # its own store: other tests' runs record into dir_run's
    code, _, err = _triage("fleet", str(fleet_dir), "--since", "7d", "--record", "--jobs", "2", env=env)
    assert code == 0, err
    now = datetime.now(timezone.utc)
    rep = report.make(Store(env["TRIAGE_DB"]), now - timedelta(days=7), now + timedelta(minutes=1), tmp_path)
    text = rep.markdown_path.read_text()
    assert "## Fleet" in text
    section = text.split("## Fleet", 1)[1].split("\n## ", 1)[0]
    assert "logs" in section and "gpu_xid" in section and "unreadable" in section
    assert "Nodes behind most hardware findings" in section and "Top changes" in section


def test_a_glob_and_a_single_file_are_sources_too(fleet_dir):
    pattern = str(fleet_dir / "job-00[1-3]")
    code, out, err = _triage("fleet", pattern, str(fleet_dir / "slurm-5001.out"), "--jobs", "1")
    rows = [json.loads(line)["fleet"] for line in out.splitlines()]
    assert code == 0, err
    assert [(r["source"], r["job"]) for r in rows] == [(pattern, "job-001"), (pattern, "job-002"), (pattern, "job-003"),
                                                       (str(fleet_dir / "slurm-5001.out"), "slurm:5001")]


def test_bad_options_are_one_line_and_exit_2(fleet_dir):
    for argv, said in ((["--ray", "auto", "--jobs", "2"], "choose one"), (["--since", "soon"], "not a duration"),
                       (["--timeout", "x", "--jobs", "1"], "not a duration")):
        code, out, err = _triage("fleet", str(fleet_dir), *argv)
        assert code == 2 and out == "" and said in err and "Traceback" not in err
