"""One input's readers shared out over forked processes (engine.split, `triage diagnose --jobs`): the same answer
as one process, whatever the shares; a lost worker is reported, never a crash or a silently partial answer."""
import json
import os
import pickle
import subprocess
import sys
import threading
import time

import pytest

from conftest import FIXTURES, ROOT
import core.ingest as ingest
import engine.split as split
from core.ingest import from_bytes
from parsers.scan.base import Collector

pytestmark = pytest.mark.skipif(not split.available(), reason="needs fork and /proc/self/fd")
GEN = [sys.executable, str(ROOT / "testkit" / "gen_logs.py")]


def test_partition_puts_the_costliest_first_and_spreads_the_rest():
    assert split.partition([0.1, 5.0, 0.2, 4.0], 0.5, 2) == [[1], [3, 2, 0]]
    assert split.partition([1.0] * 6, 0.0, 3) == [[0, 3], [1, 4], [2, 5]]
    # readers that cost nothing yet (their lines may come later) are spread, not piled onto one share
    assert sorted(map(len, split.partition([3.0, 3.0, 0, 0, 0, 0], 0.1, 2))) == [3, 3]


def test_partition_stops_where_another_process_would_not_pay():
    assert split.partition([10.0, 0.1, 0.1], 1.0, 4) == [[0, 1, 2]]    # one reader is nearly all of it
    assert split.partition([1.0, 1.0], 20.0, 2) == [[0, 1]]            # the reading itself is nearly all of it
    assert len(split.partition([2.0, 2.0, 2.0, 2.0], 1.0, 8)) == 4     # no more shares than help
    assert split.partition([2.0, 2.0], 0.0, 1) == [[0, 1]]


def _inputs() -> dict[str, bytes]:
    out = {}
    for path in sorted(FIXTURES.rglob("*")):
        if path.is_file() and path.stat().st_size < 1 << 20:
            out[str(path.relative_to(FIXTURES))] = path.read_bytes()
    for path in sorted((ROOT / "tests" / "corpus").glob("*.jsonl")):
        for line in filter(str.strip, path.read_text(encoding="utf-8").splitlines()):
            case = json.loads(line)
            out[case["id"]] = case["text"].encode()
    return out


@pytest.fixture
def small_chunks(monkeypatch):
    """64-byte chunks (the first, with the sniffed head, 128), so that even a short paste is read in many and the
    readers are shared out after the first; every split is taken (GAIN), however little the first chunk cost."""
    monkeypatch.setattr(ingest, "SNIFF", 64)
    monkeypatch.setattr(ingest, "CHUNK", 64)
    monkeypatch.setattr(split, "GAIN", float("inf"))


def _answer(engine, data: bytes, jobs: int) -> dict:
    return engine.diagnose(from_bytes(data, "x.log"), jobs=jobs).to_json_dict()


def test_every_fixture_and_corpus_case_gets_the_same_answer_when_split(engine, small_chunks):
    cases = {k: v for k, v in _inputs().items() if len(v) > 1024}   # a dozen chunks or more
    assert len(cases) > 150
    differ = [k for k, data in cases.items() if _answer(engine, data, 2) != _answer(engine, data, 1)]
    assert differ == []


@pytest.mark.parametrize("kind", ["mixed", "hf", "nccl"])
def test_long_generated_logs_get_the_same_answer_when_split(engine, tmp_path, monkeypatch, kind):
    """Chunk-wide reading (bulk readers, their regex matches kept as evidence) across the split, at 64 KiB chunks."""
    monkeypatch.setattr(ingest, "CHUNK", 64 << 10)
    monkeypatch.setattr(split, "GAIN", float("inf"))
    log = tmp_path / f"{kind}.log"
    subprocess.run([*GEN, kind, str(log), "--mb", "2"], capture_output=True, check=True)
    data = log.read_bytes()
    one = _answer(engine, data, 1)
    assert one["findings"] and _answer(engine, data, 2) == one == _answer(engine, data, 4)


class _Unsendable(Collector):
    """A reader whose state cannot be pickled: its worker cannot send it back."""
    name = "unsendable"
    triggers = ("NCCL",)

    def __init__(self):
        self.lock = threading.Lock()

    def feed(self, hit):
        pass

    def collect(self, ctx):
        pass


def _two_shares(monkeypatch):
    """Even readers stay in the parent, odd ones go to one worker."""
    monkeypatch.setattr(split, "partition", lambda cost, base, jobs: [list(range(0, len(cost), 2)),
                                                                        list(range(1, len(cost), 2))])


def _lost(d) -> set[str]:
    return {n.split()[1] for n in d.input.notes if "reader failed" in n}


def test_a_reader_that_cannot_be_sent_back_is_the_only_one_lost(engine, small_chunks, monkeypatch):
    from engine import Engine

    class WithUnsendable(Engine):
        def _readers(self):
            readers = super()._readers()   # the last one added at an odd index: in the worker's share
            return [*readers, _Unsendable()] if len(readers) % 2 else [*readers, _Unsendable(), _Unsendable()]

    _two_shares(monkeypatch)
    data = (FIXTURES / "nccl_timeout" / "lagging_rank.log").read_bytes()
    whole = _answer(engine, data, 1)
    d = WithUnsendable(engine.books, engine.options, engine.backend).diagnose(from_bytes(data, "x.log"), jobs=2)
    assert _lost(d) == {"unsendable"}
    assert [f.symptom for f in d.findings] == [f["symptom"] for f in whole["findings"]] != []


def test_a_lost_worker_costs_its_share_and_says_so(engine, small_chunks, monkeypatch):
    _two_shares(monkeypatch)
    monkeypatch.setattr(split, "answer", lambda states, failed: os._exit(3))   # runs in the worker only
    data = (FIXTURES / "nccl_timeout" / "lagging_rank.log").read_bytes()
    d = engine.diagnose(from_bytes(data, "x.log"), jobs=2)
    assert _lost(d) == {r.name for r in engine._readers()[1::2]}


def test_state_that_cannot_be_pickled_is_named_not_raised():
    kind, sent, failed = pickle.loads(split.answer({0: threading.Lock(), 1: [1, 2]}, {"x": "boom"}))
    assert kind == "ok" and pickle.loads(sent[1]) == [1, 2] and set(sent) == {1}
    assert failed["x"] == "boom" and "pickle" in failed["reader 0"]


def test_a_worker_reads_on_from_where_the_parent_was_at_the_fork(tmp_path, monkeypatch):
    """After fork, parent and worker share each file's offset until the worker takes its own, and the parent reads
    on at once: the worker must start where the parent was at the fork, and neither may move the other."""
    data = bytes(range(256)) * 64
    (tmp_path / "f.log").write_bytes(data)
    real = split._detach
    monkeypatch.setattr(split, "_detach", lambda files: (time.sleep(0.3), real(files)))   # the parent reads first
    with open(tmp_path / "f.log", "rb", buffering=0) as f:   # every read an OS read
        f.read(100)
        workers = split.start([[0]], lambda share: pickle.dumps(("ok", {0: pickle.dumps(f.read(10))}, {})))
        parent = f.read(5000)
        got, failed = [None], {}
        split.finish(workers, got, failed)
        parent += f.read(10)
    assert got[0] == data[100:110] and parent == data[100:5110] and failed == {}


def test_cli_one_big_file_split_over_two_processes(tmp_path):
    """The real command on a real file: a worker reads on from the parent's offset without moving it (they would
    share one after fork), and prints nothing itself (no doubled answer)."""
    log = tmp_path / "mixed.log"
    subprocess.run([*GEN, "mixed", str(log), "--mb", "20"], capture_output=True, check=True)
    cmd = [sys.executable, "-m", "bot.cli", "diagnose", "--json", str(log)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    one = subprocess.run([*cmd, "--jobs", "1"], capture_output=True, text=True, cwd=ROOT, env=env)
    two = subprocess.run([*cmd, "--jobs", "2"], capture_output=True, text=True, cwd=ROOT, env=env)
    assert one.returncode == two.returncode == 0 and one.stderr == two.stderr == ""
    assert one.stdout == two.stdout and two.stdout.count("\n") == 1
    assert {f["symptom"] for f in json.loads(one.stdout)["findings"]} >= {"cuda_oom", "loss_spike"}


@pytest.mark.parametrize("form", ["plain", "gz", "together"])
def test_cli_splits_one_input_and_prints_one_answer(tmp_path, monkeypatch, capsys, form):
    """In-process, so the split is certain (every split taken) and seen: the same stdout as one process, once; for a
    file, a .gz (the worker carries on the parent's decompressor) and per-node files read --together."""
    import gzip
    from bot.cli.entry import main
    log = tmp_path / "nccl.log"
    subprocess.run([*GEN, "nccl", str(log), "--mb", "8"], capture_output=True, check=True)
    args = [str(log)]
    if form == "gz":
        (tmp_path / "nccl.log.gz").write_bytes(gzip.compress(log.read_bytes(), 1))
        args = [str(tmp_path / "nccl.log.gz")]
    elif form == "together":
        lines = log.read_bytes().splitlines(keepends=True)
        for k in range(3):
            (tmp_path / f"node{k}.out").write_bytes(b"".join(lines[k * len(lines) // 3:(k + 1) * len(lines) // 3]))
        args = ["--together", *(str(tmp_path / f"node{k}.out") for k in range(3))]
    monkeypatch.setattr(ingest, "CHUNK", 1 << 20)
    assert main(["diagnose", "--json", "--jobs", "1", *args]) == 0
    one = capsys.readouterr()
    monkeypatch.setattr(split, "GAIN", float("inf"))
    started = []
    real = split.start
    monkeypatch.setattr(split, "start", lambda shares, work: started.append(len(shares)) or real(shares, work))
    assert main(["diagnose", "--json", "--jobs", "3", *args]) == 0
    three = capsys.readouterr()
    assert started == [2] and three.out == one.out and three.err == one.err == ""
    assert json.loads(one.out)["findings"]


def test_a_pipe_is_never_split(engine, small_chunks, monkeypatch, tmp_path):
    """A worker cannot read a pipe on its own (its bytes would go to whichever process reads first): stdin, or
    any input that is not a regular file, is read by one process, whatever --jobs says."""
    from bot.cli.parallel import split_jobs
    from core.ingest import Source
    assert split_jobs(4, [("-", "stdin")]) == 1 and split_jobs(4, [(str(tmp_path), "dir")]) == 1
    (tmp_path / "a.log").write_bytes(b"x\n")
    assert split_jobs(4, [(str(tmp_path / "a.log"), "a.log")]) == 4
    data = (FIXTURES / "nccl_timeout" / "lagging_rank.log").read_bytes()
    started = []
    monkeypatch.setattr(split, "start", lambda shares, work: started.append(shares) or [])
    r, w = os.pipe()
    writer = threading.Thread(target=lambda: (os.write(w, data), os.close(w)))
    writer.start()
    with os.fdopen(r, "rb") as pipe:
        d = engine.diagnose(Source("stdin", pipe), jobs=2)
    writer.join()
    assert started == [] and d.to_json_dict()["findings"] == _answer(engine, data, 1)["findings"]


def test_a_reader_sees_the_same_neighbour_lines_whatever_its_share():
    """A line's context is gathered for the largest `before`/`after` of all the readers it concerns, and each reader
    sees its own count of it: the same lines alone, beside a wider reader, or with the wider one fed elsewhere."""
    from parsers.scan.base import Reader
    from parsers.scan.scanner import Scanner

    class Wide(Reader):
        name, triggers, before, after = "wide", ("XYZ",), 2, 3

        def feed(self, hit):
            pass

    class Narrow(Reader):
        name, triggers, before, after = "narrow", ("XYZ",), 0, 1

        def __init__(self):
            self.seen = []

        def feed(self, hit):
            self.seen.append((hit.before, hit.after))

    buf = b"a\nb\nXYZ here\nc\nd\ne\nf\n"
    alone, shared = Scanner([Wide(), Narrow()]), Scanner([Wide(), Narrow()])
    shared.restrict(frozenset({1}))   # as in a worker that feeds only the narrow reader
    for sc in (alone, shared):
        sc.feed(buf)
        sc.close()
    only = Scanner([Narrow()])
    only.feed(buf)
    only.close()
    assert shared.parsers[1].seen == alone.parsers[1].seen == only.parsers[0].seen == [((), ["c"])]


def test_a_share_feeds_only_its_readers_after_lines_it_has_cached():
    """The scanner remembers which readers a combination of literals concerns; restricting it to a share forgets
    that, so a line read again after the fork goes to the share's readers only (the others are fed elsewhere)."""
    from parsers.scan.base import Reader
    from parsers.scan.scanner import Scanner

    class Rec(Reader):
        def __init__(self, name, trigger):
            self.name, self.triggers, self.lines = name, (trigger,), []

        def feed(self, hit):
            self.lines.append(hit.no)

    sc = Scanner([Rec("a", "AAA"), Rec("b", "BBB")])
    sc.feed(b"AAA and BBB\n")
    sc.restrict(frozenset({1}))
    sc.feed(b"AAA and BBB\nBBB alone\n")
    sc.close()
    assert (sc.parsers[0].lines, sc.parsers[1].lines) == ([1], [1, 2, 3])


def test_a_worker_ends_with_its_parent(tmp_path):
    """A parent stopped before it reaps its workers (a timeout's SIGTERM, a kill) takes them with it."""
    script = tmp_path / "parent.py"
    script.write_text(
        "import os, sys, time\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "import engine.split as split\n"
        "workers = split.start([[0]], lambda share: time.sleep(60) or b'')\n"
        "print(workers[0].pid, flush=True)\n"
        "os._exit(0)\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30)
    pid = int(out.stdout)
    for _ in range(100):
        try:
            with open(f"/proc/{pid}/stat") as f:
                gone = f.read().split(") ")[1].startswith("Z")   # a zombie waiting for init counts as gone
        except FileNotFoundError:
            gone = True
        if gone:
            break
        time.sleep(0.05)
    assert gone
