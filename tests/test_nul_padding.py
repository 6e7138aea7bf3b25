"""A crash log with a hole of NUL bytes before the error (issue 31, item 23): the evidence line is the error's text,
not a row of NUL escapes, and line numbers still match the file."""
import json
import subprocess
import sys

from conftest import FIXTURES, ROOT

OOM = (FIXTURES / "cuda_oom" / "new_format_fragmented.log").read_text()


def _padded(tmp_path, nuls: int = 4096):
    lines = OOM.splitlines(True)
    i = next(k for k, ln in enumerate(lines) if "OutOfMemoryError" in ln)
    steady = "".join(f"[rank0]: iteration {n} | lm loss: 2.5 | step time 1.0 s\n" for n in range(3000))   # > the sniffed head
    p = tmp_path / "crash.log"
    p.write_bytes(steady.encode() + "".join(lines[:i]).encode() + b"\x00" * nuls + "".join(lines[i:]).encode())
    return p, 3000 + i + 1


def test_the_evidence_is_the_error_text_after_a_nul_hole(tmp_path):
    p, line = _padded(tmp_path)
    r = subprocess.run([sys.executable, "-m", "bot.cli", "diagnose", "--json", str(p)], cwd=ROOT,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    ev = doc["findings"][0]["evidence"][0]
    assert doc["findings"][0]["symptom"] == "cuda_oom"
    assert ev["text"].startswith("torch.OutOfMemoryError: CUDA out of memory") and "\x00" not in ev["text"]
    assert ev["line"] == line
    assert any("NUL" in n for n in doc["input"]["notes"])


def test_nul_bytes_in_the_head_still_mean_a_binary_file(tmp_path):
    p = tmp_path / "bin.log"
    p.write_bytes(b"\x00\x01\x02" * 100 + b"\n")
    r = subprocess.run([sys.executable, "-m", "bot.cli", "diagnose", str(p)], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "binary" in r.stderr
