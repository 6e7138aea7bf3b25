"""One semantics, two feeders (issue 33): the pure-Python feeder (parsers/scan_rows.py, pastes) and the native one
(parsers/scan_polars.py, large inputs) give the same rows for every family on every fixture, every corpus case and
generated logs; and the native one names the same lines to be read one by one as a plain substring test does."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pl = pytest.importorskip("polars")

from parsers import READERS  # noqa: E402
from parsers.scan import native as scan_polars  # noqa: E402
from parsers.scan.rows import Family, State, python_rows  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NUM = r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?"
# the readers' own families, and a few more shaped like them (a count-only family, text on every row, distinct)
EXTRA = (
    Family("t.iter", ("iteration",), (("it", r"iteration\s+(\d+)\s*/"), ("loss", rf"lm loss: ({NUM}) *\|")),
           need=("it", "loss"), distinct=("it", "loss")),
    Family("t.warn", ("NCCL WARN", "Error", "error"), (("what", r"(?:NCCL WARN|[Ee]rror):?\s*(\S+)"),), text=True),
    Family("t.rank", ("[rank",), (("rank", r"\[rank(\d+)\]"),), distinct=("rank",)),
)


def families() -> list[Family]:
    return [f for r in READERS for f in getattr(r, "families", ())] + list(EXTRA)


def texts() -> list[tuple[str, bytes]]:
    out = [(str(p.relative_to(ROOT)), p.read_bytes()) for p in sorted((ROOT / "tests" / "fixtures").rglob("*"))
           if p.is_file() and p.suffix in (".log", ".txt", ".out", "")]
    for p in sorted((ROOT / "tests" / "corpus").glob("*.jsonl")):
        for line in p.read_text().splitlines():
            case = json.loads(line)
            out.append((f"{p.name}:{case['id']}", case["text"].encode()))
    return out


def _both(buf: bytes, fams: list[Family], size: int):
    """Both feeders over the same chunks of `size` bytes (newline-aligned), the distinct state carried along."""
    a, b, sa, sb, no = [], [], State(), State(), 0
    while buf:
        cut = buf.rfind(b"\n", 0, size) + 1 or len(buf)
        chunk, buf = buf[:cut], buf[cut:]
        df = scan_polars.frame(chunk)
        a += [r.as_tuples() for r in python_rows(chunk, fams, no, sa)]
        b += [r.as_tuples() for r in (scan_polars.rows(df, fams, no, sb) if df is not None
                                      else python_rows(chunk, fams, no, sb))]
        no += chunk.count(b"\n")
    return a, b


def test_both_feeders_give_the_same_rows_on_every_fixture_and_corpus_case():
    fams, read_natively = families(), 0
    for name, buf in texts():
        a, b = _both(buf, fams, 1 << 30)
        assert a == b, name
        read_natively += scan_polars.frame(buf) is not None
    assert read_natively > 400   # (most inputs are read natively; the rest fall back, tested below)


@pytest.mark.parametrize("kind", ["megatron", "mixed", "hf", "nccl"])
def test_both_feeders_give_the_same_rows_on_generated_logs_across_chunks(kind, tmp_path):
    path = tmp_path / f"{kind}.log"
    subprocess.run([sys.executable, str(ROOT / "testkit" / "gen_logs.py"), kind, str(path), "--mb", "3"], check=True,
                   capture_output=True)
    a, b = _both(path.read_bytes(), families(), 1 << 20)
    assert a == b


def test_inputs_the_native_reader_cannot_take_line_for_line_fall_back():
    for buf in (b"a\x1fb\n", b"a\r\nb\n", b"\xef\xbb\xbfa\n", b"\xff\xfe bad utf-8\n", b""):
        assert scan_polars.frame(buf) is None
    df = scan_polars.frame(b"x\n\nlast without newline")
    assert df["l"].to_list() == ["x", "", "last without newline"] and df["at"].to_list() == [0, 2, 3]


def test_native_line_selection_matches_substring_tests():
    plain = ["NCCL WARN", "Traceback", "error"]
    owned = [(["loss", "nan iterations"], ["lm loss:"]), (["Channel"], [" via NET/"])]
    for name, buf in texts():
        df = scan_polars.frame(buf)
        if df is None:
            continue
        lines = buf.decode().split("\n")[:df.height]
        want = [i for i, t in enumerate(lines) if any(p in t for p in plain) or
                any(any(x in t for x in trig) and not any(s in t for s in sel) for trig, sel in owned)]
        assert scan_polars.wanted(df, plain, owned) == want, name


def test_both_feeders_give_the_same_diagnosis_json_on_every_fixture_corpus_case_and_generated_log(books, tmp_path):
    """The whole answer, not only the rows: every fixture and corpus case, and generated logs over several chunks,
    diagnosed with the Python feeder and with the native one."""
    from core.ingest import from_bytes
    from engine import Engine
    engines = [Engine(books, feeder=f) for f in ("python", "polars")]
    cases = texts()
    for kind in ("mixed", "nccl"):
        path = tmp_path / f"{kind}.log"
        subprocess.run([sys.executable, str(ROOT / "testkit" / "gen_logs.py"), kind, str(path), "--mb", "12"],
                       check=True, capture_output=True)
        cases.append((kind, path.read_bytes()))
    for name, buf in cases:
        a, b = (e.diagnose(from_bytes(buf, name)).to_json_dict() for e in engines)
        assert a == b, name
