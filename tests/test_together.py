"""`triage diagnose --together`: one job's per-node logs read as one, so ranks are compared across nodes."""
import gzip
import io
import json
import os
import subprocess
import sys
import tarfile

from conftest import FIXTURES, ROOT

NODES = sorted((FIXTURES / "multinode").glob("*.out"))   # p5-st-1 (ranks 0-7), p5-st-2 (ranks 8-15, behind)


def triage(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], input=stdin, capture_output=True, cwd=ROOT,
                          env={**os.environ})


def test_each_node_alone_does_not_guess_but_together_names_the_lagging_node():
    for path in NODES:
        alone = json.loads(triage("diagnose", "--json", str(path)).stdout)["findings"][0]
        assert alone["facts"]["lagging_ranks"] == []          # another node's ranks are not "dead" ranks
        assert "every node's log is needed" in alone["title"]
        assert alone["steps"][0]["changes"][0]["name"].startswith("triage diagnose --together")
        assert alone["facts"]["log_holds_host"] == path.stem
    r = triage("diagnose", "--json", "--together", *map(str, NODES))
    assert r.returncode == 0
    docs = r.stdout.decode().strip().splitlines()
    assert len(docs) == 1
    d = json.loads(docs[0])
    top = d["findings"][0]
    assert top["symptom"] == "nccl_timeout"
    assert top["facts"]["lagging_ranks"] == list(range(8, 16)) and top["facts"]["lagging_hosts"] == ["p5-st-2"]
    assert top["facts"]["world_size"] == 16 and len(top["facts"]["reporting_ranks"]) == 16
    assert d["input"]["parts"] == [{"name": "p5-st-1.out", "first_line": 1, "lines": 25},
                                   {"name": "p5-st-2.out", "first_line": 26, "lines": 25}]
    assert d["input"]["lines"] == 50
    # evidence says where it is in its own file; the line number runs on across files
    ev = top["evidence"][0]
    assert ev["source"] == f"p5-st-1.out:{ev['line']}"
    drain = [c for s in top["steps"] for c in s["changes"] if "drain" in c["name"]]
    assert drain and "p5-st-2" in drain[0]["name"]


def test_several_node_shares_read_separately_get_a_hint_to_read_them_together():
    r = triage("diagnose", "--json", *map(str, NODES))
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2
    assert r.stderr.decode() == ("triage: 2 of these logs each hold one node's ranks of a multi-node job; read them "
                                 "as one with --together to see which rank is behind\n")
    assert triage("diagnose", "--json", "--together", *map(str, NODES)).stderr == b""
    assert triage("diagnose", "--json", str(NODES[0])).stderr == b""          # one file: its step already says so


def test_text_output_shows_file_and_line_of_each_evidence_line():
    out = triage("diagnose", "--together", *map(str, NODES)).stdout.decode()
    assert out.startswith("== 2 inputs (p5-st-1.out, p5-st-2.out) (50 lines")
    assert "rank 8, 9, 10, 11, 12, 13, 14, 15 are behind" in out
    assert "    p5-st-1.out:10: [E1104 03:12:44.118230411 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog" in out


def test_archive_members_and_a_file_without_final_newline_join_cleanly(tmp_path):
    a, b = (p.read_bytes() for p in NODES)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in (("logs/p5-st-1.out", a.rstrip(b"\n")), ("logs/p5-st-2.out", b)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    (tmp_path / "job.tar.gz").write_bytes(buf.getvalue())
    d = json.loads(triage("diagnose", "--json", "--together", str(tmp_path / "job.tar.gz")).stdout)
    assert d["input"]["lines"] == 50 and [p["lines"] for p in d["input"]["parts"]] == [25, 25]
    assert d["findings"][0]["facts"]["lagging_hosts"] == ["p5-st-2"]


def test_an_unusable_file_is_skipped_with_a_note_and_an_all_bad_set_exits_2(tmp_path):
    (tmp_path / "core.bin").write_bytes(b"\x00\x01\x02" * 4000)
    (tmp_path / "empty.out").write_bytes(b"")
    r = triage("diagnose", "--json", "--together", str(NODES[0]), str(tmp_path / "core.bin"),
               str(tmp_path / "missing.out"), str(NODES[1]))
    assert r.returncode == 0
    d = json.loads(r.stdout)
    assert d["findings"][0]["facts"]["lagging_hosts"] == ["p5-st-2"]
    notes = " ".join(d["input"]["notes"])
    assert "core.bin" in notes and "missing.out" in notes
    r = triage("diagnose", "--together", str(tmp_path / "core.bin"), str(tmp_path / "empty.out"))
    assert r.returncode == 2 and r.stdout == b""
    assert r.stderr.decode().count("\n") == 1 and "Traceback" not in r.stderr.decode()


def test_gzip_and_stdin_can_be_joined():
    gz = gzip.compress(NODES[1].read_bytes())
    d = json.loads(triage("diagnose", "--json", "--together", str(NODES[0]), "-", stdin=gz).stdout)
    assert [p["name"] for p in d["input"]["parts"]] == ["p5-st-1.out", "stdin"]
    assert d["findings"][0]["facts"]["lagging_ranks"] == list(range(8, 16))


def test_a_log_directory_stands_for_the_log_files_in_it(tmp_path):
    job = tmp_path / "job-1234"
    (job / "node-a").mkdir(parents=True)
    (job / ".snapshots").mkdir()
    (job / "node-a" / "p5-st-1.out").write_bytes(NODES[0].read_bytes())
    (job / "p5-st-2.out").write_bytes(NODES[1].read_bytes())
    (job / ".snapshots" / "old.log").write_text("torch.OutOfMemoryError: CUDA out of memory.\n")
    (job / "model.pt").write_bytes(b"\x00PK" * 5000)          # not a log by its name: never opened
    d = json.loads(triage("diagnose", "--json", "--together", str(job)).stdout)
    assert d["input"]["name"] == "job-1234/ (2 files)"      # the job id in the name groups the weekly report
    assert [p["name"] for p in d["input"]["parts"]] == ["node-a/p5-st-1.out", "p5-st-2.out"]
    assert d["findings"][0]["facts"]["lagging_hosts"] == ["p5-st-2"]
    assert d["findings"][0]["evidence"][0]["source"].startswith("node-a/p5-st-1.out:")
    r = triage("diagnose", "--json", str(job))                 # without --together: one diagnosis per file
    assert r.returncode == 0 and [json.loads(x)["input"]["name"] for x in r.stdout.decode().splitlines()] == \
        ["node-a/p5-st-1.out", "p5-st-2.out"]
    (tmp_path / "empty").mkdir()
    r = triage("diagnose", str(tmp_path / "empty"))
    assert r.returncode == 2 and "a directory without log files" in r.stderr.decode()
