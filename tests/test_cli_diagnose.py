"""`triage diagnose` as a user runs it: a real subprocess on real files."""
import gzip
import json
import os
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT

TRIAGE = [sys.executable, "-m", "bot.cli"]


def triage(*args, stdin=None, env=None):
    e = {**os.environ, **(env or {})}
    return subprocess.run([*TRIAGE, *args], input=stdin, capture_output=True, cwd=ROOT, env=e)


def test_text_output_names_root_cause_evidence_changes_and_citations():
    r = triage("diagnose", str(FIXTURES / "cuda_oom" / "new_format_fragmented.log"))
    assert r.returncode == 0
    out = r.stdout.decode()
    first = out.splitlines()[1]
    assert first.startswith("ROOT CAUSE  [critical] cuda_oom:")
    assert "line 21:" in out and "torch.OutOfMemoryError" in out
    assert "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in out
    assert "--micro-batch-size 2   # was 4" in out
    assert "runbook: oom#micro-batch" in out
    assert "[ML]" in out and "[Infra]" in out


def test_a_crash_no_parser_knows_is_shown_with_its_lines_and_never_called_healthy():
    crash = ("[rank3]: Traceback (most recent call last):\n"
             '[rank3]:   File "train.py", line 88, in <module>\n'
             "[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
             "[rank3]: CUDA kernel errors might be asynchronously reported at some other API call\n")
    out = triage("diagnose", "-", stdin=crash.encode()).stdout.decode()
    assert "not ones Train Triage recognises" in out and "healthy" not in out
    assert "line 3 (×1): [rank3]: RuntimeError: CUDA error: an illegal memory access" in out
    assert "Traceback" not in out and "asynchronously" not in out   # known-benign lines are not listed
    # near-miss: counters that say all is well are not "error lines"
    smi = (FIXTURES / "healthy" / "smi_q_healthy.log").read_bytes()
    assert b"Uncorrectable Error" in smi
    assert "looks healthy" in triage("diagnose", "-", stdin=smi).stdout.decode()


def test_json_for_several_files_is_one_object_per_line_in_order(tmp_path):
    gz = tmp_path / "spike.log.gz"
    gz.write_bytes(gzip.compress((FIXTURES / "loss_spike" / "megatron_spike.log").read_bytes()))
    files = [FIXTURES / "nccl_timeout" / "lagging_rank.log", gz, FIXTURES / "healthy" / "socket_bootstrap_efa.log"]
    r = triage("diagnose", "--json", *map(str, files))
    assert r.returncode == 0, r.stderr
    docs = [json.loads(line) for line in r.stdout.decode().splitlines()]
    assert [d["input"]["name"] for d in docs] == ["lagging_rank.log", "spike.log.gz", "socket_bootstrap_efa.log"]
    assert docs[0]["schema"] == "triage.diagnosis/v1"
    f = docs[0]["findings"][0]
    assert f["symptom"] == "nccl_timeout" and f["facts"]["lagging_ranks"] == [3]
    assert set(f) >= {"symptom", "rule", "title", "severity", "confidence", "evidence", "facts", "steps"}
    step = f["steps"][0]
    assert step["owner"] in ("ml", "infra") and step["cite"]
    assert docs[1]["findings"][0]["symptom"] == "loss_spike"
    assert docs[2]["findings"] == []
    assert docs[2]["versions"]["aws_ofi_nccl"] == "1.11.0"


def test_stdin_dash():
    data = (FIXTURES / "fork_enomem" / "dataloader.log").read_bytes()
    r = triage("diagnose", "--json", "-", stdin=data)
    doc = json.loads(r.stdout)
    assert doc["input"]["name"] == "stdin" and doc["findings"][0]["symptom"] == "fork_enomem"
    assert doc["input"]["lines"] == 8


@pytest.mark.parametrize("name,data,msg", [
    ("empty.log", b"", "empty"),
    ("blank.log", b"  \n\n\t\n", "empty"),
    ("image.png", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 40, "binary"),
    ("noise.log", bytes((i * 151 + 7) % 256 for i in range(20000)).replace(b"\x00", b"\x01"), "not a text log"),
    ("bad.gz", b"\x1f\x8b\x08\x00garbage-not-deflate", "gzip"),
])
def test_unusable_input_is_one_line_and_exit_2(tmp_path, name, data, msg):
    p = tmp_path / name
    p.write_bytes(data)
    r = triage("diagnose", str(p))
    err = r.stderr.decode()
    assert r.returncode == 2
    assert len(err.strip().splitlines()) == 1 and msg in err and "Traceback" not in err
    assert r.stdout == b""


def test_missing_file_and_directory_exit_2(tmp_path):
    for target in (tmp_path / "nope.log", tmp_path):
        r = triage("diagnose", str(target))
        assert r.returncode == 2 and len(r.stderr.decode().strip().splitlines()) == 1


def test_one_bad_file_does_not_stop_the_others(tmp_path):
    bad = tmp_path / "empty.log"
    bad.write_bytes(b"")
    r = triage("diagnose", "--json", str(bad), str(FIXTURES / "gpu_xid" / "xid79.log"))
    assert r.returncode == 2
    assert json.loads(r.stdout)["findings"][0]["symptom"] == "gpu_xid"


def test_bad_user_playbook_fails_at_start(tmp_path):
    (tmp_path / "x.yaml").write_text("playbooks:\n  - symptom: cuda_oom\n    steps: []\n")
    r = triage("diagnose", str(FIXTURES / "gpu_xid" / "xid79.log"), env={"TRIAGE_PLAYBOOKS": str(tmp_path)})
    assert r.returncode == 2 and "x.yaml" in r.stderr.decode()


def test_eval_reports_accuracy_precision_recall_and_misses(tmp_path):
    corpus = tmp_path / "c.jsonl"
    cases = [
        {"id": "a", "label": "fork_enomem", "text": (FIXTURES / "fork_enomem" / "dataloader.log").read_text()},
        {"id": "b", "label": "none", "text": (FIXTURES / "healthy" / "oom_mentions.log").read_text()},
        {"id": "c", "label": "gpu_xid", "text": "all good here\n"},
    ]
    corpus.write_text("\n".join(json.dumps(c) for c in cases) + "\n")
    r = triage("eval", str(corpus))
    out = r.stdout.decode()
    assert r.returncode == 0
    assert "top-1 accuracy: 2/3 = 66.7%" in out
    assert "c: expected gpu_xid, got none" in out
    assert "fork_enomem" in out and "1.00" in out


def _mild_spike_log() -> bytes:
    """A plain training loop whose loss jumps 40% over its median once, at step 50 (line 50)."""
    wiggle = (0.004, -0.006, 0.002, -0.003, 0.007, -0.001, 0.005, -0.008)
    rows = [f"step {s} | loss {2.75 if s == 50 else 2.0 - s * 0.002 + wiggle[s % 8]:.4f} | lr 3.0e-04"
            for s in range(1, 81)]
    return ("\n".join(rows) + "\n").encode()


def test_a_team_sets_its_own_loss_spike_threshold():
    log = _mild_spike_log()
    default = json.loads(triage("diagnose", "--json", "-", stdin=log).stdout)
    spike = default["findings"][0]            # a smooth curve: 40% over the median beats the built-in 30% for it
    assert spike["symptom"] == "loss_spike" and spike["facts"]["line"] == 50 and spike["facts"]["loss_at_spike"] == 2.75
    relaxed = json.loads(triage("diagnose", "--json", "-", stdin=log,
                                env={"TRIAGE_LOSS_SPIKE": "smooth_rel=0.5"}).stdout)
    assert relaxed["findings"] == []          # the team's own bar for smooth curves: 50%
    strict = json.loads(triage("diagnose", "--json", "-", stdin=log,
                               env={"TRIAGE_LOSS_SPIKE": "rel=0.3, mad_k=200"}).stdout)
    assert strict["findings"] == []           # both tests must pass: a huge robust-deviation bar stops it


@pytest.mark.parametrize("value", ["rel", "ratio=0.3", "window=2.5", "rel=-1", "min_history=40"])
def test_a_bad_loss_spike_setting_is_one_line_and_exit_2(value):
    r = triage("diagnose", "-", stdin=_mild_spike_log(), env={"TRIAGE_LOSS_SPIKE": value})
    err = r.stderr.decode()
    assert r.returncode == 2 and err.startswith("triage: TRIAGE_LOSS_SPIKE: ") and err.count("\n") == 1


@pytest.mark.parametrize("line", [
    "[rank3]:[E1104 03:12:44.118230411 ProcessGroupNCCL.cpp:1496] [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group "
    "watchdog thread terminated with exception: CUDA error: an illegal memory access was encountered",
    "RuntimeError: CUDA error: device-side assert triggered",
    "libfabric:88:1700000000::efa:core:efa_device_construct():120<warn> Error: Unknown error -29",
])
def test_crash_lines_without_a_parser_are_listed_as_unrecognised(run, line):
    d = run(line + "\nCUDA kernel errors might be asynchronously reported at some other API call.\n")
    assert d.findings == [] and [u["line"] for u in d.unclaimed] == [1]


def test_rough_edges_a_new_user_hits(tmp_path):
    bare = triage()
    assert bare.returncode == 2 and b"diagnose" in bare.stderr and b"usage" in bare.stderr and not bare.stdout
    backup = triage("db", "backup", str(tmp_path / "no" / "such" / "dir" / "x.db"),
                    env={"TRIAGE_DB": str(tmp_path / "t.db")})
    err = backup.stderr.decode()
    assert backup.returncode == 2 and err.startswith("triage: cannot back up") and "Traceback" not in err
    job = triage("diagnose", "--job", "j1", str(FIXTURES / "gpu_xid" / "xid79.log"))
    assert job.returncode == 2 and b"--record" in job.stderr
    null = triage("diagnose", "/dev/null")
    assert null.returncode == 2 and null.stderr.decode().startswith("triage: /dev/null:")


def test_control_sequences_from_a_log_never_reach_the_terminal_raw(tmp_path):
    """OSC window-title and hyperlink sequences, BEL, backspace and C1 codes are shown escaped, in text and JSON."""
    log = tmp_path / "ctl.log"
    log.write_bytes("RuntimeError: boom \x1b]0;pwned\x07 \x1b]8;;http://evil\x07click\x1b]8;;\x07 \x08\x08 \x9b31m\n"
                    .encode())
    text = triage("diagnose", str(log))
    for raw in (b"\x1b", b"\x07", b"\x08", "\x9b".encode()):
        assert raw not in text.stdout
    assert b"\\x1b]0;pwned\\x07" in text.stdout
    doc = triage("diagnose", "--json", str(log))
    assert "\x9b".encode() not in doc.stdout
    assert json.loads(doc.stdout)["unclaimed"][0]["example"].endswith("\x9b31m")   # the data itself is intact


def test_facts_read_as_values_and_the_drain_command_names_the_host_from_the_log():
    out = triage("diagnose", "--verbose", str(ROOT / "examples" / "dmesg-xid79.log")).stdout.decode()
    assert "facts:" not in triage("diagnose", str(ROOT / "examples" / "dmesg-xid79.log")).stdout.decode()
    facts = next(ln for ln in out.splitlines() if ln.strip().startswith("facts:"))
    assert "{'" not in facts and "['" not in facts and "xid: 79" in facts and "hosts=ip-10-4-12-88" in facts
    assert 'scontrol update nodename=ip-10-4-12-88 state=drain reason="GPU Xid"' in out and "<node>" not in out
    no_host = triage("diagnose", "-", stdin=b"NVRM: Xid (PCI:0000:a8:00): 79, pid=1, name=python3, GPU has fallen "
                                              b"off the bus.\n").stdout.decode()
    assert "nodename=<node>" in no_host


def test_jobs_diagnoses_files_in_worker_processes_with_the_same_output_in_the_same_order(tmp_path):
    """--jobs N (issue 16): separate files in N processes print exactly what one by one prints, in the order given:
    JSON and text, an archive's members, a file that is not a log and one that does not exist (exit 2 for both),
    and the hint for node shares read separately."""
    import shutil
    import tarfile
    from test_together import NODES
    shutil.copy(FIXTURES / "cuda_oom" / "new_format_fragmented.log", tmp_path / "a.log")
    (tmp_path / "empty.log").write_bytes(b"")
    with tarfile.open(tmp_path / "logs.tar.gz", "w:gz") as tar:
        tar.add(FIXTURES / "loss_spike" / "megatron_spike.log", arcname="run/spike.log")
        tar.add(FIXTURES / "nccl_timeout" / "lagging_rank.log", arcname="run/timeout.log")
    files = [str(tmp_path / "a.log"), str(tmp_path / "empty.log"), str(tmp_path / "logs.tar.gz"),
             str(tmp_path / "missing.log"), *map(str, NODES)]
    for fmt in (["--json"], []):
        one = triage("diagnose", *fmt, "--jobs", "1", *files)
        many = triage("diagnose", *fmt, "--jobs", "3", *files)
        assert (many.returncode, many.stdout, many.stderr) == (one.returncode, one.stdout, one.stderr)
    assert one.returncode == 2 and one.stdout.decode().count("ROOT CAUSE") == 5
    assert b"empty.log: input is empty" in one.stderr and b"missing.log" in one.stderr
    assert b"2 of these logs each hold one node's ranks" in one.stderr
    bad = triage("diagnose", "--jobs", "0", files[0])
    assert bad.returncode == 2 and b"--jobs takes a whole number of processes" in bad.stderr and bad.stdout == b""


def test_worker_processes_only_pay_off_for_several_big_files(tmp_path):
    from bot.cli.parallel import POOL_FROM, jobs_for
    big = []
    for name in ("n1.log", "n2.log"):
        with open(tmp_path / name, "wb") as f:
            f.truncate(POOL_FROM // 2)   # sparse: no disk used
        big.append((str(tmp_path / name), name))
    small = [(str(FIXTURES / "cuda_oom" / "new_format_fragmented.log"), "a")] * 3
    assert jobs_for(0, big, together=False) == min(os.cpu_count() or 1, 2)
    assert jobs_for(0, small, together=False) == 1 and jobs_for(2, small, together=False) == 2
    assert jobs_for(0, big[:1], together=False) == jobs_for(4, big, together=True) == 1
    assert jobs_for(4, [*big, ("-", "stdin")], together=False) == 1
