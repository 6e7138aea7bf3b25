"""Reading bytes and finding candidate lines: chunk boundaries, encodings, terminal junk, caps."""
import codecs
import gzip
import io

import pytest

from core.ingest import Source, UnusableInput, from_bytes
from parsers.scan.base import Hit, Reader
from parsers.scan.scanner import Scanner, clean

WATCHDOG = ("[rank{r}]:[E1104 03:12:44.1 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
            "600100 milliseconds before timing out.")


class Collect(Reader):
    name = "collect"
    triggers = ("NEEDLE",)
    before = 2
    after = 2

    def __init__(self):
        self.hits: list[Hit] = []

    def feed(self, hit):
        self.hits.append(hit)


def test_context_lines_cross_chunk_boundaries():
    p = Collect()
    sc = Scanner([p])
    sc.feed(b"a\nb\nNEEDLE one\n")
    sc.feed(b"c\nd\ne\nNEEDLE two\nf\n")
    sc.close()
    assert [(h.no, h.text, h.before, h.after) for h in p.hits] == [
        (3, "NEEDLE one", ("a", "b"), ["c", "d"]),
        (7, "NEEDLE two", ("d", "e"), ["f"]),
    ]
    assert sc.lines == 8


def test_clean_strips_ansi_and_keeps_last_carriage_return_redraw():
    raw = "\x1b[31m 10%|#  | 1/10\r 20%|## | 2/10\r[E] NEEDLE found\x1b[0m\r".encode()
    assert clean(raw) == "[E] NEEDLE found"


def test_a_tqdm_line_shows_its_last_segment_with_something_in_it():
    """Without colour codes only the last visible segment is decoded (issue 16); blank means blank once decoded:
    a no-break space or a file separator is whitespace, a broken UTF-8 byte is not."""
    bar = " 10%|█         | 1/10 [00:01<00:09, 1.00s/it]".encode()
    assert clean(bar + b"\r" + bar + b"\r" + b" " * 40 + b"\r{'loss': 2.1}") == "{'loss': 2.1}"
    assert clean(b"{'loss': 2.1}\r" + "\u00a0".encode() + b"\r\x1c\r  ") == "{'loss': 2.1}"
    assert clean(b"a\r\xff\r ") == "\ufffd"
    assert clean(b"\r \r\t\r") == ""
    assert clean("x\r\u00e9t\u00e9".encode()) == "\u00e9t\u00e9"


def test_crlf_ansi_tqdm_log_keeps_line_numbers(run):
    lines = ["\x1b[32mepoch 1\x1b[0m", " 5%|#   | 1/20\r 10%|##  | 2/20", "ok", WATCHDOG.format(r=0),
             WATCHDOG.format(r=1)]
    d = run("\r\n".join(lines).encode() + b"\r\n")
    f = d.findings[0]
    assert f.symptom == "nccl_timeout" and [e.line for e in f.evidence] == [4, 5]
    assert not f.evidence[0].text.endswith("\r")


def test_utf16_with_bom_and_latin1_are_read(run):
    text = "\n".join([WATCHDOG.format(r=0), WATCHDOG.format(r=1)]) + "\n"
    d = run(codecs.BOM_UTF16_LE + text.encode("utf-16-le"))
    assert d.findings[0].symptom == "nccl_timeout"
    d = run(("Gerät café\n" + text).encode("latin-1"))
    assert d.findings[0].symptom == "nccl_timeout" and d.findings[0].evidence[0].line == 2


def test_gzip_members_and_truncated_gzip(run):
    body = ("x\n" * 1000 + WATCHDOG.format(r=3) + "\n").encode()
    d = run(gzip.compress(body))
    assert d.findings[0].facts["reporting_ranks"] == [3] and d.input.lines == 1001 and not d.input.truncated
    d = run(gzip.compress(body[:1000]) + gzip.compress(body[1000:]))
    assert d.findings[0].evidence[0].line == 1001
    cut = gzip.compress(body * 50)[:-200]
    d = run(cut)
    assert d.input.truncated


def test_size_cap_reads_head_and_marks_truncated():
    src = Source("big.log", io.BytesIO(b"line\n" * 100000), max_bytes=1000)
    chunks = list(src.chunks())
    assert sum(map(len, chunks)) <= 1000 and src.truncated


def test_gzip_bomb_is_capped():
    bomb = gzip.compress(b"A" * (64 << 20))
    src = Source("bomb.gz", io.BytesIO(bomb), max_bytes=1 << 20)
    total = sum(len(c) for c in src.chunks())
    assert total <= 1 << 20 and src.truncated


def test_megabyte_line_is_scanned_without_error(run):
    big = b"x" * (3 << 20)
    d = run(big + b"\n" + WATCHDOG.format(r=2).encode() + b"\n")
    assert d.findings[0].evidence[0].line == 2
    d = run(b"y" * (2 << 20) + b" torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    assert d.findings[0].symptom == "cuda_oom" and len(d.findings[0].evidence[0].text) <= 500


def test_evidence_is_bounded_for_thousands_of_identical_errors(run):
    line = "OSError: [Errno 12] Cannot allocate memory\n    self.pid = os.fork()\n"
    d = run(line * 20000)
    f = d.findings[0]
    assert f.symptom == "fork_enomem" and f.facts["count"] == 20000 and len(f.evidence) <= 5


def test_unusable_inputs_raise_clear_errors():
    for data in (b"", b"\n \n", b"\x00\x01\x02" * 100, b"PK\x03\x04rest"):
        with pytest.raises(UnusableInput):
            list(from_bytes(data).chunks())


def _wrapped(path, key, **extra):
    import json
    return "".join(json.dumps({key: line + "\n", **extra}) + "\n"
                   for line in path.read_text().splitlines()).encode()


@pytest.mark.parametrize("key,extra", [("log", {"stream": "stderr", "time": "2024-11-04T03:12:44.1Z"}),
                                       ("message", {"@timestamp": "2024-11-04 03:12:44"}),
                                       ("MESSAGE", {"_HOSTNAME": "p5-st-2", "PRIORITY": "3"})])
def test_json_wrapped_container_logs_read_like_the_plain_log(run, key, extra):
    from conftest import FIXTURES
    for path in (FIXTURES / "efa_mr_registration" / "rail_rc22.log", FIXTURES / "cuda_oom" / "new_format_fragmented.log"):
        plain = run(path.read_bytes())
        wrapped = run(_wrapped(path, key, **extra))
        assert [(f.symptom, f.title, [(e.line, e.text) for e in f.evidence], f.facts) for f in wrapped.findings] == \
            [(f.symptom, f.title, [(e.line, e.text) for e in f.evidence], f.facts) for f in plain.findings]
        assert wrapped.input.lines == plain.input.lines
        assert any(f'"{key}" field' in n for n in wrapped.input.notes)


def test_json_lines_without_a_log_field_are_read_as_they_are(run):
    """Near-miss: a JSONL metrics file is data, not a wrapped log; a loss spike in it is still found, by step."""
    import json
    rows = [{"step": s, "loss": 6.1 if s == 50 else round(2.0 - s * 0.002 + (0.004, -0.006, 0.002, -0.003)[s % 4], 4)}
            for s in range(1, 81)]
    d = run("".join(json.dumps(r) + "\n" for r in rows))
    assert d.input.notes == []
    assert d.findings[0].symptom == "loss_spike" and d.findings[0].facts["iteration"] == 50
    assert any(e.line == 50 and e.text.startswith('{"step": 50') for e in d.findings[0].evidence)


def test_a_hit_shows_each_reader_its_own_count_of_neighbour_lines():
    """The scanner gathers neighbours for the most demanding reader; a reader asking for fewer sees only its own,
    and a line near the start of the log has fewer before it than asked (never a wrapped-around slice)."""
    from parsers.scan.base import Hit
    hit = Hit(9, "x", before=("a", "b", "c"), after=["d", "e", "f", "g"])
    hit.view = (2, 1)
    assert (hit.before, hit.after) == (("b", "c"), ["d"])
    hit.view = (12, 12)
    assert (hit.before, hit.after) == (("a", "b", "c"), ["d", "e", "f", "g"])
    hit.view = (0, 0)
    assert (hit.before, hit.after, hit.joined(2)) == ((), [], "x")
