"""The bad-input matrix beyond the basics: archives, oversize files, giant lines, and parsers under fuzzing."""
import gzip
import io
import json
import os
import subprocess
import sys
import tarfile
import time
import zipfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import FIXTURES, ROOT
from testkit.adversarial import ADVERSARIAL_LINES

XID = (FIXTURES / "gpu_xid" / "xid79.log").read_bytes()
OOM = (FIXTURES / "cuda_oom" / "new_format_fragmented.log").read_bytes()


def triage(*args, env=None):
    e = {**os.environ, **(env or {})}
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], capture_output=True, cwd=ROOT, env=e)


def test_zip_and_tar_gz_are_triaged_member_by_member(tmp_path):
    z = tmp_path / "logs.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("node1/rank0.log", OOM)
        zf.writestr("node2/dmesg.txt", XID)
        zf.writestr("empty.log", b"")
    t = tmp_path / "logs.tar.gz"
    with tarfile.open(t, "w:gz") as tf:
        for name, data in (("a/hang.log", (FIXTURES / "nccl_timeout" / "lagging_rank.log").read_bytes()),
                           ("b/xid.log", XID)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    r = triage("diagnose", "--json", str(z), str(t))
    docs = [json.loads(x) for x in r.stdout.decode().splitlines()]
    got = [(d["input"]["name"], d["findings"][0]["symptom"]) for d in docs]
    assert got == [("logs.zip:node1/rank0.log", "cuda_oom"), ("logs.zip:node2/dmesg.txt", "gpu_xid"),
                   ("logs.tar.gz:a/hang.log", "nccl_timeout"), ("logs.tar.gz:b/xid.log", "gpu_xid")]
    assert r.returncode == 2 and "empty.log: input is empty" in r.stderr.decode()


def test_zip_bomb_member_is_capped(tmp_path):
    z = tmp_path / "bomb.zip"
    with zipfile.ZipFile(z, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("huge.log", b"all good here\n" * (8 << 20))  # ~112 MB that packs to ~100 KB
    r = triage("diagnose", "--json", str(z), env={"TRIAGE_MAX_BYTES": str(4 << 20)})
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["input"]["truncated"] and doc["input"]["bytes"] <= 4 << 20


def test_oversize_file_reads_head_and_tail_with_true_line_numbers(tmp_path):
    p = tmp_path / "big.log"
    filler = b"INFO step ok, nothing to see here at all\n" * 120000
    p.write_bytes(OOM + filler + XID)
    total = p.read_bytes().count(b"\n")
    r = triage("diagnose", "--json", str(p), env={"TRIAGE_MAX_BYTES": str(1 << 20)})
    doc = json.loads(r.stdout)
    first = {f["symptom"]: f["evidence"][0]["line"] for f in doc["findings"]}
    assert first["cuda_oom"] == 21 and first["gpu_xid"] == total - 2
    assert doc["input"]["truncated"] and "skipped" in doc["input"]["notes"][0]
    text = triage("diagnose", str(p), env={"TRIAGE_MAX_BYTES": str(1 << 20)}).stdout.decode()
    assert "TRUNCATED" in text and "lines in between were skipped" in text


def test_a_head_bigger_than_one_read_chunk_keeps_true_line_numbers(tmp_path):
    """A cap of 24 MiB: the 12 MiB head is read in 8 MiB chunks (never the whole half of the cap at once) and ends
    on a line boundary; a failure in the head's second chunk and one in the tail keep their line numbers."""
    line = b"INFO step ok, nothing to see here at all\n"   # 41 bytes
    head_lines = (11 << 20) // len(line)
    p = tmp_path / "big.log"
    with open(p, "wb") as f:
        f.write(line * head_lines + OOM + line * 400000 + XID)
    total = p.read_bytes().count(b"\n")
    doc = json.loads(triage("diagnose", "--json", str(p), env={"TRIAGE_MAX_BYTES": str(24 << 20)}).stdout)
    first = {f["symptom"]: f["evidence"][0]["line"] for f in doc["findings"]}
    assert first["gpu_xid"] == total - 2 and doc["input"]["truncated"]
    assert first["cuda_oom"] == head_lines + 21   # as in the fixture alone, shifted by the lines before it


def test_ten_megabyte_single_line_is_handled(tmp_path):
    p = tmp_path / "one-line.log"
    p.write_bytes(b"x" * (10 << 20) + b" torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB"
                  + b"y" * (1 << 20) + b"\n" + XID)
    r = triage("diagnose", "--json", str(p))
    doc = json.loads(r.stdout)
    assert r.returncode == 0
    assert {f["symptom"]: f["evidence"][0]["line"] for f in doc["findings"]} == {"gpu_xid": 3, "cuda_oom": 1}
    assert len(doc["findings"][1]["evidence"][0]["text"]) <= 500


def test_truncated_gzip_reads_what_is_there(tmp_path):
    p = tmp_path / "cut.log.gz"
    blob = gzip.compress(OOM + b"".join(b"filler line %d\n" % i for i in range(100000)))
    p.write_bytes(blob[: len(blob) // 2])
    doc = json.loads(triage("diagnose", "--json", str(p)).stdout)
    assert doc["findings"][0]["symptom"] == "cuda_oom" and doc["input"]["truncated"]


ADVERSARIAL = st.sampled_from(ADVERSARIAL_LINES)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(st.text(max_size=300), ADVERSARIAL), min_size=1, max_size=30))
def test_parsers_never_raise_and_stay_fast_on_random_and_adversarial_input(lines, engine):
    from core.ingest import UnusableInput, from_bytes
    data = "\n".join(lines).encode("utf-8", errors="replace")
    t0 = time.perf_counter()
    try:
        engine.diagnose(from_bytes(data))
    except UnusableInput:
        pass
    per_line = (time.perf_counter() - t0) / max(1, data.count(b"\n") + 1)
    # Linear patterns take ~10 ms for a whole one-line input (mostly fixed cost); catastrophic backtracking would
    # show as the 0.5 s regex timeout or worse. The bound leaves room for a busy CI machine.
    assert per_line < 0.25, f"{per_line * 1000:.1f} ms per line"


LINE = ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
        "of 79.15 GiB of which 1.00 GiB is free.\n")


@pytest.mark.parametrize("data", [
    b"\xff\xfe" + LINE.encode("utf-16-le"),          # UTF-16 with its BOM
    LINE.encode("utf-16-le"),                        # UTF-16 without a BOM: the NUL in every other byte tells
    LINE.encode("utf-16-be"),
    b"\xff\xfe" + LINE.encode(),                     # starts with FF FE but is UTF-8: read as UTF-8
], ids=["le-bom", "le", "be", "fffe-then-utf8"])
def test_encodings_are_told_by_their_bytes_not_by_the_first_two(run, data):
    d = run(data)
    assert [f.symptom for f in d.findings] == ["cuda_oom"] and d.findings[0].facts["free_gib"] == 1.0


def test_a_fifo_in_a_log_directory_is_skipped_with_a_note_not_waited_on(tmp_path):
    (tmp_path / "node1.log").write_bytes((FIXTURES / "gpu_xid" / "xid79.log").read_bytes())
    os.mkfifo(tmp_path / "node2.log")
    r = subprocess.run([sys.executable, "-m", "bot.cli", "diagnose", "--together", str(tmp_path)], cwd=ROOT,
                       capture_output=True, timeout=60)
    assert r.returncode == 0 and b"gpu_xid" in r.stdout
    assert b"node2.log: skipped, not a regular file" in r.stderr


def test_an_archive_over_the_member_cap_says_how_many_were_skipped(tmp_path):
    from core.inputs import MAX_MEMBERS
    path = tmp_path / "many.zip"
    with zipfile.ZipFile(path, "w") as z:
        for i in range(MAX_MEMBERS + 6):
            z.writestr(f"node{i:02d}.log", "step 1 | loss 2.0\n")
    for args, data in (([str(path)], None), (["-"], path.read_bytes())):
        r = subprocess.run([sys.executable, "-m", "bot.cli", "diagnose", *args], input=data, cwd=ROOT,
                           capture_output=True, timeout=120)
        assert r.returncode == 0 and f"only the first {MAX_MEMBERS} of {MAX_MEMBERS + 6} files".encode() in r.stderr


def _patterns():
    """Every rx pattern the parsers and collectors define (module level, or inside a rule table)."""
    import pkgutil
    from importlib import import_module

    import parsers
    from parsers.scan.base import rx
    seen: dict[int, tuple[str, rx]] = {}

    def walk(name, value, depth=0):
        if isinstance(value, rx):
            seen.setdefault(id(value), (name, value))
        elif isinstance(value, (tuple, list)) and depth < 3:
            for v in value:
                walk(name, v, depth + 1)
    for info in pkgutil.walk_packages(parsers.__path__, "parsers."):
        mod = import_module(info.name)
        for k, v in vars(mod).items():
            walk(f"{info.name}.{k}", v)
    return list(seen.values())


def test_no_pattern_backtracks_for_long_on_a_line_short_enough_to_search_untimed():
    """Lines up to RX_UNTIMED characters are searched without the regex timeout (issue 16: the timeout's clock reads
    cost more than most searches). Every pattern, on adversarial text of that length made from its own fixed words
    and the characters patterns repeat, must finish quickly — a nested quantifier would not."""
    from parsers.scan.base import RX_UNTIMED
    patterns = _patterns()
    assert len(patterns) > 100
    slow = []
    for name, p in patterns:
        texts = [line[:RX_UNTIMED] for line in ADVERSARIAL_LINES]
        texts += [(w + c * RX_UNTIMED)[:RX_UNTIMED] for w in (*p.needs, "") for c in " a1.:([,|-_/\t9e"]
        compiled = p.compiled   # compiled once, outside the timing
        for t in texts:
            try:
                # the better of two tries: a pause of the machine or the collector is not a backtracking pattern
                took = min(_timed(compiled, t) for _ in range(2))
            except TimeoutError:
                slow.append((name, t[:40], "timeout"))
                continue
            if took > 0.05:
                slow.append((name, t[:40], f"{took:.3f} s"))
    assert slow == []


def _timed(compiled, text: str) -> float:
    t0 = time.perf_counter()
    list(compiled.finditer(text, timeout=2.0))
    return time.perf_counter() - t0
