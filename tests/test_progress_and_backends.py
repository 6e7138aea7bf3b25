"""Big inputs: a progress line only on a terminal; every scanner backend (Hyperscan, pyahocorasick, pure Python)
finds the same things."""
import importlib.util
import json
import os
import pty
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT

GEN = [sys.executable, str(ROOT / "testkit" / "gen_logs.py")]


@pytest.fixture(scope="module")
def big_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("big") / "nccl.log"
    info = json.loads(subprocess.run([*GEN, "nccl", str(path), "--mb", "60"], capture_output=True, check=True).stdout)
    return path, info


def test_progress_only_on_a_terminal(big_log):
    path, _ = big_log
    cmd = [sys.executable, "-m", "bot.cli", "diagnose", "--json", str(path)]
    r = subprocess.run(cmd, capture_output=True, cwd=ROOT)
    assert r.returncode == 0 and r.stderr == b""
    json.loads(r.stdout)
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=slave, cwd=ROOT)
    os.close(slave)
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    p.wait(timeout=120)
    assert b"read" in out and b"MiB/s" in out and b"symptom family" in out


def test_injected_failures_found_at_their_lines(big_log, engine):
    from core.inputs import open_path
    path, info = big_log
    d = engine.diagnose(open_path(str(path), 1 << 40))
    first = {f.symptom: f.evidence[0].line for f in d.findings}
    assert first == info["injected"]
    timeout = next(f for f in d.findings if f.symptom == "nccl_timeout")
    assert timeout.facts["lagging_ranks"] == [info["lagging_rank"]] and timeout.facts["world_size"] == 512
    assert timeout.facts["lagging_hosts"] == ["compute-st-p5-27"]


# every scanner backend installed here: Hyperscan (Vectorscan on ARM), pyahocorasick, pure Python
BACKENDS = tuple(b for b, mod in (("re", "re"), ("hyperscan", "hyperscan"), ("ahocorasick", "ahocorasick"))
                 if importlib.util.find_spec(mod))


def test_the_scanner_backends_agree(books):
    from core.ingest import from_bytes
    from engine import Engine
    from parsers.scan import backends as scan
    if len(BACKENDS) < 2:
        pytest.skip("only the pure-Python scanner is installed")
    cases = sorted(FIXTURES.rglob("*.log"))
    assert len(cases) > 50
    engines = {b: Engine(books, backend=b) for b in BACKENDS}
    for path in cases:
        out = {b: e.diagnose(from_bytes(path.read_bytes(), path.name)).to_json_dict() for b, e in engines.items()}
        assert all(o == out["re"] for o in out.values()), path
    assert isinstance(scan.make_backend([b"x"], "re"), scan._ReBackend)
    for name in BACKENDS[1:]:
        assert scan.make_backend([b"x"], name).name == name
    assert scan.make_backend([b"x"]).name == BACKENDS[1]   # auto: hyperscan first, then pyahocorasick


def test_the_aho_corasick_backend_groups_lines_as_hyperscan_does():
    """Same candidate lines, ends, first match (the focus of a giant line's window) and literals found."""
    pytest.importorskip("hyperscan")
    pytest.importorskip("ahocorasick")
    from parsers.scan.scanner import make_backend
    lits = [b"NCCL WARN", b"WARN", b"error", b"rror", b"loss", b"Traceback", b"CUDA out of memory", b"out of"]
    buf = (b"x NCCL WARN ... error\nplain\n" + b"a" * 9000 + b" CUDA out of memory, loss\n{'loss': 1}\n"
           b"WARN at the end")
    norm = lambda it: [(ls, le, first, sorted(found)) for ls, le, first, found in it]   # noqa: E731
    assert norm(make_backend(lits, "ahocorasick").lines(buf)) == norm(make_backend(lits, "hyperscan").lines(buf))
    assert len(norm(make_backend(lits, "ahocorasick").lines(buf))) == 4


def test_both_scanners_agree_on_the_whole_corpus_and_an_hf_arguments_dump(books):
    """The pure-Python matcher finds non-overlapping literals only: a trigger that half-overlaps another (HF's
    'per_device_train_batch_size' against a '_size=' trigger once did) loses lines there and nowhere else."""
    if len(BACKENDS) < 2:
        pytest.skip("only the pure-Python scanner is installed")
    from core.ingest import from_bytes
    from engine import Engine
    texts = [json.loads(x)["text"] for p in sorted((ROOT / "tests" / "corpus").glob("*.jsonl"))
             for x in p.read_text(encoding="utf-8").splitlines() if x.strip()]
    texts.append("***** Running training *****\nTrainingArguments(\n_n_gpu=1,\ngradient_accumulation_steps=2,\n"
                 "per_device_train_batch_size=8,\nmax_grad_norm=1.0,\n)\ntorch.OutOfMemoryError: CUDA out of memory.\n")
    # a rank-prefixed Megatron banner: the ' --' flag trigger starts one character before it on the same line
    texts.append("[rank0]: ------------------------ arguments ------------------------\n[rank0]:   micro_batch_size "
                 "........ 4\n[rank0]: torchrun pretrain_gpt.py --micro-batch-size 4 --clip-grad 1.0\n")
    engines = {b: Engine(books, backend=b) for b in BACKENDS}
    for text in texts:
        out = {b: e.diagnose(from_bytes(text.encode(), "case")).to_json_dict() for b, e in engines.items()}
        assert all(o == out["re"] for o in out.values()), text[:200]
    assert out["re"]["job"] == {"micro_batch_size": 4, "clip_grad": 1.0, "framework": "megatron"}
    hf = engines["re"].diagnose(from_bytes(texts[-2].encode(), "hf")).job
    assert hf["micro_batch_size"] == 8 and hf["clip_grad"] == 1.0


def test_megatron_bulk_path_matches_line_by_line_reading(engine, monkeypatch, tmp_path):
    from core.ingest import from_bytes
    from parsers.convergence import LossParser
    from parsers.scan.scanner import Scanner
    gen = json.loads(subprocess.run([*GEN, "megatron", str(tmp_path / "m.log"), "--mb", "3"], capture_output=True,
                                    check=True).stdout)
    text = (tmp_path / "m.log").read_text().splitlines()
    text[40] = text[40].replace(text[40].split("lm loss: ")[1].split(" |")[0], "nan")
    text.insert(60, "[2024-02-11 09:43:20,113] [INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 "
                    "Skipping step. Attempted loss scale: 4, reducing to 2")
    cases = [(tmp_path / "m.log").read_bytes(), "\n".join(text).encode(),
             (FIXTURES / "loss_spike" / "megatron_spike.log").read_bytes(),
             (FIXTURES / "loss_nan" / "megatron_nan.log").read_bytes()]
    assert LossParser.bulk_wanted(cases[0]) and not LossParser.bulk_wanted(b"{'loss': 1.0}\n" * 50)
    # "lm loss:" on every line, but not on iteration lines: the regex pass says no after the counts said maybe
    assert not LossParser.bulk_wanted(b" validation loss at step 1000 | lm loss: 2.3 | lm loss PPL: 9.9 |\n" * 50)
    sc = Scanner([LossParser()])
    sc.feed(cases[0])
    assert sc.bulk == [0]
    bulk = [engine.diagnose(from_bytes(c)).to_json_dict() for c in cases]
    monkeypatch.setattr(LossParser, "bulk_wanted", classmethod(lambda cls, sample: False))
    plain = [engine.diagnose(from_bytes(c)).to_json_dict() for c in cases]
    assert bulk == plain
    assert bulk[0]["findings"][0]["facts"]["line"] == gen["injected"]["loss_spike"]
    assert [f["symptom"] for f in bulk[1]["findings"]] == ["loss_nan", "loss_spike"]


@pytest.mark.parametrize("cap", [4096, 3])
def test_nccl_communicator_lines_read_as_rows_by_both_feeders(monkeypatch, cap):
    """NCCL INFO set-up logs: the communicator lines are a family's rows (issue 33); a rank not seen before,
    including one whose first line names no host, or a world size grown in a later communicator, gives the same
    ranks, hosts and size from the Python feeder and the native one."""
    import parsers.collectors.context as context
    from parsers.collectors.context import ContextCollector
    from parsers.scan.scanner import Scanner
    monkeypatch.setattr(context, "RANK_HOSTS", cap)

    def comm(host, rank, world):
        prefix = f"{host}:41{rank}:42{rank} [{rank % 8}] " if host else ""
        return f"{prefix}NCCL INFO comm 0x7f{rank:x}a0 rank {rank} nranks {world} cudaDev {rank % 8} - Init COMPLETE\n"
    chunks = ["".join(comm(f"node-{r // 2}", r, 4) for _ in range(70) for r in range(4)),
              "".join(comm(f"node-{r // 2}", r, 8) for r in (3, 1, 0, 2) * 3),     # known ranks, a larger world
              comm("", 5, 8) + comm("node-2", 4, 8) + comm("node-9", 5, 8) + comm("node-2", 5, 8)]
    states = []
    for feeder in ("polars", "python"):
        sc = Scanner([ContextCollector()], feeder=feeder)
        for c in chunks:
            sc.feed(c.encode())
        sc.close()
        r = sc.parsers[0]
        states.append((r.world, r.rank_hosts, r.hosts))
    assert states[0] == states[1]
    assert states[0][0] == 8 and states[0][1] == ({0: "node-0", 1: "node-0", 2: "node-1"} if cap == 3 else
                                                  {0: "node-0", 1: "node-0", 2: "node-1", 3: "node-1", 4: "node-2",
                                                   5: "node-9"})


def test_the_mixed_512_rank_benchmark_log_is_read_right_by_both_scanners(books, tmp_path):
    """The benchmark's realistic input (issue 16): `[rankN]:` prefixes on NCCL set-up and iteration lines, an OOM
    traceback from one rank; the OOM and the loss spike are found at their lines, the step time and throughput
    are read, and both scanner backends say the same."""
    from core.ingest import from_bytes
    from engine import Engine
    path = tmp_path / "mixed.log"
    info = json.loads(subprocess.run([*GEN, "mixed", str(path), "--mb", "4"], capture_output=True, check=True).stdout)
    docs = [Engine(books, backend=b).diagnose(from_bytes(path.read_bytes(), path.name)) for b in BACKENDS]
    d = docs[0]
    assert {f.symptom: f.evidence[0].line for f in d.findings if f.symptom == "cuda_oom"} == \
        {"cuda_oom": info["injected"]["cuda_oom"]}
    assert next(f for f in d.findings if f.symptom == "loss_spike").facts["line"] == info["injected"]["loss_spike"]
    assert 2.9 < d.step_time["median_s"] < 3.1 and 400 < d.step_time["tflops_per_gpu"] < 425
    assert all(x.to_json_dict() == d.to_json_dict() for x in docs[1:])


def test_bulk_reading_starts_after_a_long_nccl_set_up(tmp_path):
    """Issue 16: a multi-node job's log opens with megabytes of NCCL set-up; the loss reader still switches to
    chunk-wide reading once a chunk is mostly iterations, alongside a reader already reading chunk-wide."""
    from parsers.convergence import LossParser
    from parsers.scan.scanner import Scanner
    setup = b"h1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA\n" * 20000
    iters = b"".join(b" iteration %8d/ 1000 | elapsed time per iteration (ms): 3000.0 | lm loss: 2.500000E+00 | "
                     b"grad norm: 0.250 | number of nan iterations:   0 |\n" % i for i in range(1, 20001))
    sc = Scanner([LossParser()])
    sc.feed(setup)
    assert sc.bulk == []
    sc.feed(iters)
    assert sc.bulk == [0] and len(sc.parsers[0].steps) == 20000


@pytest.mark.parametrize("iterations,chunk_wide", [(12000, True), (2500, False)])
def test_a_first_chunk_that_opens_with_set_up_is_judged_whole(iterations, chunk_wide):
    """The first MiB of a 512-rank log can be all NCCL set-up while its first chunk is mostly iterations: the chunk
    is judged whole and read chunk-wide from its first line (a chunk with too few iterations is not)."""
    from parsers.convergence import LossParser
    from parsers.scan.scanner import Scanner
    setup = b"h1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA\n" * 14000
    iters = b"".join(b" iteration %8d/ 99999 | elapsed time per iteration (ms): 3000.0 | lm loss: 2.500000E+00 | "
                     b"grad norm: 0.250 | number of nan iterations:   0 |\n" % i for i in range(1, iterations + 1))
    assert len(setup) > 1 << 20 and (len(iters) > 1 << 20) == chunk_wide
    sc = Scanner([LossParser()])
    sc.feed(setup + iters)
    assert sc.bulk == ([0] if chunk_wide else [])
    sc.close()
    assert len(sc.parsers[0].steps) == iterations


def test_the_chunk_wide_loss_curve_has_one_point_per_step_when_several_ranks_print_it():
    """The last pipeline stage's ranks may all print the same step: the one bulk curve takes it once, so a spike is
    one spike and its evidence is the steps before it, not copies of one step (issue 16's mixed log)."""
    from parsers.scan.base import Context
    from parsers.convergence import LossParser
    from parsers.scan.scanner import Scanner
    lines = []
    for it in range(1, 3001):
        loss = 7.9 if it == 1500 else 2.5 - it * 1e-5
        lines += [b"[rank%d]: iteration %8d/ 9000 | elapsed time per iteration (ms): %.1f | lm loss: %.6E | "
                  b"grad norm: 0.250 | number of nan iterations:   0 |" % (r, it, 3000.0 + r, loss) for r in (4, 5, 6, 7)]
    sc = Scanner([LossParser()])
    sc.feed(b"\n".join(lines) + b"\n")
    sc.close()
    assert sc.bulk == [0]
    spike = next(f for f in sc.parsers[0].finish(Context()) if f.symptom == "loss_spike")
    assert spike.facts["spikes"] == 1 and spike.facts["line"] == 4 * 1499 + 1
    steps = [e.text.split("|")[0].split()[-2] for e in spike.evidence]
    assert len(set(steps)) == len(steps) and "1500/" in steps


def test_a_reader_that_fails_chunk_wide_is_not_judged_again(tmp_path):
    """The per-chunk bulk judging must step over a reader that was switched off after raising."""
    from parsers.convergence import LossParser
    from parsers.scan.scanner import Scanner

    class Broken(LossParser):
        def feed_bulk(self, no, m):
            raise RuntimeError("boom")
    def iters(first):
        return b"".join(b" iteration %8d/ 9000 | elapsed time per iteration (ms): 3000.0 | lm loss: 2.500000E+00 | "
                        b"grad norm: 0.250 | number of nan iterations:   0 |\n" % i for i in range(first, first + 2000))
    sc = Scanner([Broken(), LossParser()])
    sc.feed(iters(1))
    sc.feed(iters(2001))   # the broken reader, now switched off, is stepped over when the chunk is judged
    assert sc.bulk == [1] and "loss" in sc.failed and len(sc.parsers[1].steps) == 4000


def test_megatron_throughput_rows_agree_between_feeders(books, tmp_path):
    """Megatron's `throughput per GPU (TFLOP/s/GPU)` lines are a family's rows (issue 33): the same readings, median,
    evidence and finding from both feeders, also when a line is woken for another reason ("mfu")."""
    from engine import Engine
    from core.ingest import from_bytes
    from parsers.scan.scanner import Scanner
    from parsers.slow.util import UtilParser
    subprocess.run([*GEN, "mixed", str(tmp_path / "m.log"), "--mb", "3"], capture_output=True, check=True)
    low = (FIXTURES / "low_gpu_util" / "megatron_h100_low_tflops.log").read_text()
    lines = low.splitlines()
    at = next(i for i, t in enumerate(lines) if "TFLOP/s/GPU" in t)
    lines[at] += " mfu check"   # also woken by "mfu": must not be read twice
    cases = [(tmp_path / "m.log").read_bytes(), low.encode(), "\n".join(lines).encode()]
    sc = Scanner([UtilParser()])
    sc.feed(cases[2])
    assert len(sc.parsers[0].tflops) == low.count("TFLOP/s/GPU")
    bulk = [Engine(books, feeder="polars").diagnose(from_bytes(c)).to_json_dict() for c in cases]
    plain = [Engine(books, feeder="python").diagnose(from_bytes(c)).to_json_dict() for c in cases]
    assert bulk == plain
    assert [f["symptom"] for f in bulk[1]["findings"]] == ["low_gpu_util"] and bulk[0]["step_time"]["tflops_per_gpu"]


def test_an_iteration_line_does_not_wake_the_nvlink_reader_but_nvidia_smi_does():
    """Every rank's iteration line says "throughput per GPU": the NVLink reader is woken by "GPU <digit>"
    (nvidia-smi's `GPU 0: NVIDIA H100 ...`), not by "GPU " (issue 16: 64k wasted feeds per 24 MiB mixed log)."""
    from parsers.gpu import NvlinkParser
    from parsers.scan.scanner import Scanner

    class Counting(NvlinkParser):
        def feed(self, hit):
            self.fed = getattr(self, "fed", 0) + 1
            super().feed(hit)
    sc = Scanner([Counting()])
    sc.feed(b"[rank3]: [2026-11-30 10:00:00] iteration 10/ 100 | elapsed time per iteration (ms): 3030.2 | "
            b"throughput per GPU (TFLOP/s/GPU): 415.8 | lm loss: 2.5E+00 |\n" * 100)
    assert getattr(sc.parsers[0], "fed", 0) == 0
    sc.feed(b"GPU 3: NVIDIA H100 80GB HBM3 (UUID: GPU-5e1d2c3b)\n\t Link 0: <inactive>\n")
    sc.close()
    assert sc.parsers[0].fed == 2 and sc.parsers[0].down == {"GPU 3": [0]}


def test_the_tqdm_heavy_hf_benchmark_log_is_read_right_by_both_scanners(books, tmp_path):
    """The benchmark's HF Trainer + DeepSpeed input (issue 16): carriage-return bar redraws before every printed
    line; the settling fp16 loss scale is no finding, the spike is found at its line by both scanner backends."""
    from core.ingest import from_bytes
    from engine import Engine
    path = tmp_path / "hf.log"
    info = json.loads(subprocess.run([*GEN, "hf", str(path), "--mb", "2"], capture_output=True, check=True).stdout)
    docs = [Engine(books, backend=b).diagnose(from_bytes(path.read_bytes(), path.name)) for b in BACKENDS]
    assert [f.symptom for f in docs[0].findings] == ["loss_spike"]
    assert docs[0].findings[0].facts["line"] == info["injected"]["loss_spike"]
    assert docs[0].findings[0].evidence[-1].text.startswith("{'loss': ")   # the dict, not the bar before it
    assert all(x.to_json_dict() == docs[0].to_json_dict() for x in docs[1:])


def test_scanners_share_the_compiled_hyperscan_database_but_not_its_scratch(books):
    """The database for a trigger set is compiled once per process (~30 ms, most of a warm bot's time for a short
    paste); each scanner keeps its own scratch, so diagnoses in parallel threads give the answers they give alone."""
    pytest.importorskip("hyperscan")
    from concurrent.futures import ThreadPoolExecutor
    from core.ingest import from_bytes
    from engine import Engine
    from parsers.scan.scanner import make_backend
    a, b = make_backend([b"NCCL WARN", b"Xid"], "hyperscan"), make_backend([b"NCCL WARN", b"Xid"], "hyperscan")
    assert a.db is b.db and a.scratch is not b.scratch
    assert make_backend([b"NCCL WARN"], "hyperscan").db is not a.db
    engine = Engine(books, backend="hyperscan")
    cases = sorted(FIXTURES.rglob("*.log"))[:24]
    alone = [engine.diagnose(from_bytes(p.read_bytes(), p.name)).to_json_dict() for p in cases]
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda p: engine.diagnose(from_bytes(p.read_bytes(), p.name)).to_json_dict(),
                                 cases * 3))
    assert together == alone * 3


def test_a_new_process_loads_the_compiled_hyperscan_database_from_the_cache(tmp_path, monkeypatch):
    """A fresh process (the CLI on a paste, a Slurm epilog) loads the database instead of compiling it again; a
    damaged file is compiled again and replaced; an unwritable cache still scans."""
    hyperscan = pytest.importorskip("hyperscan")
    from parsers.scan import backends as scan
    lits, buf = [b"NCCL WARN", b"Xid", b"CUDA out of memory"], b"a\nNVRM: Xid 79\nb NCCL WARN c\n"
    expect = list(scan._HyperscanBackend(lits).lines(buf))
    monkeypatch.setattr(scan, "_HS_DATABASES", {})
    first = scan.make_backend(lits, "hyperscan", tmp_path / "c")
    [saved] = (tmp_path / "c").iterdir()
    monkeypatch.setattr(scan, "_HS_DATABASES", {})   # as in a new process
    monkeypatch.setattr(hyperscan, "Database", lambda **k: pytest.fail("compiled, not loaded"))
    second = scan.make_backend(lits, "hyperscan", tmp_path / "c")
    assert list(first.lines(buf)) == list(second.lines(buf)) == expect
    monkeypatch.undo()
    saved.write_bytes(b"not a database")
    monkeypatch.setattr(scan, "_HS_DATABASES", {})
    assert list(scan.make_backend(lits, "hyperscan", tmp_path / "c").lines(buf)) == expect
    assert saved.read_bytes() != b"not a database"
    (tmp_path / "ro").write_text("a file where the directory should be")
    monkeypatch.setattr(scan, "_HS_DATABASES", {})
    assert list(scan.make_backend(lits, "hyperscan", tmp_path / "ro" / "c").lines(buf)) == expect


def test_a_spike_right_where_chunk_wide_reading_starts_is_judged_on_the_history_read_before():
    """A multi-rank log read line by line at first (NCCL set-up opens it) switches to chunk-wide reading later; the
    one chunk-wide curve goes on from the curve read so far, so a spike on the first step it reads is still one
    (the 20 MiB mixed benchmark log had its spike there and reported none)."""
    from parsers.scan.base import Context
    from parsers.convergence import LossParser
    from parsers.scan.scanner import Scanner

    def steps(first, last, spike_at=None):
        return b"".join(b"[rank%d]: iteration %8d/ 9000 | elapsed time per iteration (ms): 3000.0 | lm loss: %.6E | "
                        b"grad norm: 0.250 | number of nan iterations:   0 |\n"
                        % (r, it, 7.9 if it == spike_at else 2.5 - it * 1e-5) for it in range(first, last)
                        for r in (4, 5, 6, 7))
    setup = b"[rank3]:h1:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/AWS Libfabric/0/GDRDMA\n" * 20000
    sc = Scanner([LossParser()])
    sc.feed(setup + steps(1, 400))
    assert sc.bulk == []
    sc.feed(steps(400, 3000, spike_at=400))
    assert sc.bulk == [0]
    spike = next(f for f in sc.parsers[0].finish(Context()) if f.symptom == "loss_spike")
    assert spike.facts["line"] == 20000 + 4 * 399 + 1 and spike.facts["loss_at_spike"] == 7.9
