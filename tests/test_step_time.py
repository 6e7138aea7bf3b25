"""Issue 15: step times from any format, summarised as facts (slow outliers, a lasting slowdown) even when no
symptom fires."""
import random
import re

import pytest

from bot.answer.render import diagnosis_text
from bot.slack.blocks import diagnosis_blocks


def megatron(n=120, slow_from=None, spike_at=None, noise=15.0, filler=0, seed=3, tflops=None, gpu=None):
    rnd, out = random.Random(seed), ([f"GPU 0: NVIDIA {gpu} (UUID: GPU-0)"] if gpu else [])
    for i in range(1, n + 1):
        ms = 2600.0 if i == 1 else (1000 + rnd.uniform(-noise, noise)) * (1.2 if slow_from and i >= slow_from else 1)
        if i == spike_at:
            ms = 4800.0
        out.append(f" [2026-11-30 10:00:{i % 60:02d}] iteration {i * 10:8d}/  500000 | consumed samples: {i * 5120:10d}"
                   f" | elapsed time per iteration (ms): {ms:.1f}"
                   + (f" | throughput per GPU (TFLOP/s/GPU): {tflops * 1000 / ms:.1f}" if tflops else "")
                   + " | learning rate: 2.999E-04 | global batch size:   512"
                   f" | lm loss: {3.2 - i * 0.001:.6E} | loss scale: 1.0 | grad norm: 0.312 | number of skipped "
                   "iterations:   0 | number of nan iterations:   0 |")
        out += [f"[rank{k}] checkpoint shard {k} ok" for k in range(filler)]
    return "\n".join(out) + "\n"


def test_a_megatron_slowdown_and_a_slow_step_are_facts_of_a_healthy_log(run):
    d = run(megatron(slow_from=80, spike_at=40))
    assert d.findings == []
    st = d.step_time
    assert st["source"] == "megatron" and st["steps"] == 118 and st["warmup_left_out"] == 2
    assert 0.98 < st["median_s"] < 1.1
    assert st["anomalous_steps"] == 1 and st["anomalies"][0]["iteration"] == 400
    assert st["anomalies"][0]["x_median"] > 4
    assert st["slowdown"]["iteration"] == 800 and 18 < st["slowdown"]["pct"] < 22
    text = diagnosis_text(d)
    assert "iteration 800 on, a lasting slowdown of" in text and "worst 4.8 s" in text
    blocks, _ = diagnosis_blocks(d)
    assert any(":stopwatch:" in str(b) for b in blocks)
    assert "스텝 시간" in diagnosis_text(d, "ko")


def test_the_chunk_wide_and_the_line_by_line_readings_agree(run):
    """A plain Megatron log is read chunk-wide; the same lines among other lines are read one by one."""
    bulk = run(megatron(slow_from=80, spike_at=40)).step_time
    mixed = run(megatron(slow_from=80, spike_at=40, filler=4)).step_time
    assert {k: v for k, v in bulk.items() if k not in ("anomalies", "slowdown")} == \
           {k: v for k, v in mixed.items() if k not in ("anomalies", "slowdown")}
    assert bulk["slowdown"]["iteration"] == mixed["slowdown"]["iteration"] == 800


def test_a_steady_run_has_no_slowdown_or_outliers_and_a_short_one_no_summary(run):
    st = run(megatron(noise=60.0)).step_time
    assert st["anomalous_steps"] == 0 and "slowdown" not in st
    assert run(megatron(n=9)).step_time == {}            # 7 readings after warm-up: too few to say anything
    assert run("iteration 10/ 100 | lm loss: 3.1 |\n").step_time == {}


def test_nemo_and_key_value_step_times(run):
    nemo = "".join(f"Epoch 0: : {i}/1000 [00:{i:02d}<, reduced_train_loss=2.{i:02d}, global_step={i}.0, "
                   f"train_step_timing in s={1.5 if i < 30 else 1.9}]\n" for i in range(1, 50))
    st = run(nemo).step_time
    assert st["source"] == "train_step_timing" and st["median_s"] == 1.5 and st["slowdown"]["iteration"] == 30
    kv = "".join(f"step={i} loss=2.1 step_time_ms={250 + (i % 3)}\n" for i in range(1, 30))
    st = run(kv).step_time
    assert st["source"] == "step_time" and 0.25 <= st["median_s"] <= 0.252 and "slowdown" not in st
    # a number that is not a step time: "iter_time" must be a key, not part of another word
    assert run("".join(f"max_iter_timeout={i}\n" for i in range(30))).step_time == {}


def test_a_megatron_line_without_a_grad_norm_is_not_a_nan_gradient(run):
    """--clip-grad 0 prints no grad norm; read line by line (a short paste) that once counted as a NaN grad norm."""
    d = run("[rank3]: iteration 100/ 1000 | lm loss: 3.2 | elapsed time per iteration (ms): 980.1 |\n"
            "[rank3]: some other line\n")
    assert d.findings == []
    nan = run("[rank3]: iteration 100/ 1000 | lm loss: 3.2 | grad norm: nan |\n" * 3)
    assert [f.symptom for f in nan.findings] == ["loss_nan"]


def test_hf_trainer_dicts_read_without_regexes_give_the_same_diagnosis(engine, monkeypatch):
    """Issue 16: the string-only reading of {'loss': …} lines must answer exactly as the general path does —
    on every corpus case and fixture that has such lines, and on a long log with a spike, NaNs and a prefix."""
    import json
    from pathlib import Path

    import parsers.convergence as conv
    from conftest import FIXTURES, ROOT
    from core.ingest import from_bytes
    rnd = random.Random(5)
    long_log = "".join(
        ("{'loss': %s, 'grad_norm': %s, 'learning_rate': 1.9e-05, 'epoch': %.2f}\n"
         % ("nan" if i in (700, 701) else f"{(9.0 if i == 400 else 2.5) + rnd.random() * 0.05:.4f}",
            "inf" if i == 650 else f"{0.8 + rnd.random() * 0.1:.3f}", i / 100))
        + ("[rank0]: {'loss': 2.4, 'epoch': 3.0}\n" if i == 300 else "") for i in range(1, 900))
    texts = [long_log] + [json.loads(x)["text"] for p in sorted((ROOT / "tests" / "corpus").glob("*.jsonl"))
                          for x in p.read_text(encoding="utf-8").splitlines() if "{'loss': " in x]
    texts += [p.read_text() for p in sorted(Path(FIXTURES).rglob("*.log")) if "{'loss': " in p.read_text()]
    assert len(texts) > 5
    fast = [engine.diagnose(from_bytes(t.encode(), "hf")).to_json_dict() for t in texts]
    monkeypatch.setattr(conv, "hf_dict", lambda t: None)
    slow = [engine.diagnose(from_bytes(t.encode(), "hf")).to_json_dict() for t in texts]
    assert fast == slow
    assert [f["symptom"] for f in fast[0]["findings"]] == ["loss_nan", "loss_spike"]


def test_throughput_of_a_healthy_run_is_a_fact_and_mfu_needs_a_known_gpu(run):
    """Issue 15: TFLOP/s per GPU from Megatron's --log-throughput, with MFU against the GPU's peak when the log
    names the GPU; a healthy run (no low_gpu_util) still carries them for the weekly report."""
    from bot.answer.render import step_time_line
    d = run(megatron(tflops=420.0, gpu="H100 80GB HBM3"))
    assert d.findings == []
    st = d.step_time
    assert 410 < st["tflops_per_gpu"] < 430 and st["gpu_model"] == "H100"
    assert abs(st["mfu_pct"] - 100 * st["tflops_per_gpu"] / 989) < 0.1   # H100 dense BF16 peak
    assert f"{st['tflops_per_gpu']:g} TFLOP/s per GPU, MFU {st['mfu_pct']:g}% on H100" in step_time_line(st)
    unnamed = run(megatron(tflops=420.0)).step_time
    assert "tflops_per_gpu" in unnamed and "mfu_pct" not in unnamed   # no GPU named: no MFU claimed
    assert "MFU" not in step_time_line(unnamed) and "TFLOP/s per GPU" in step_time_line(unnamed)


def test_a_huge_run_s_throughput_median_is_exact_without_millions_of_python_floats():
    """Issue 16: a 1 GB log holds millions of TFLOP/s readings; their median is taken on the array's own buffer."""
    import statistics
    from parsers.step_series import BIG, Readings
    rnd, r = random.Random(5), Readings()
    for i in range(BIG + 1001):   # an even number kept after the first is left out: the two middle ones averaged
        r.add(400 + rnd.gauss(0, 20), i + 1, "line")
    assert len(r.kept()) % 2 == 0 and r.median() == statistics.median(r.kept())
    small = Readings()
    for v in (100.0, 300.0, 200.0):
        small.add(v, 1, "x")
    assert small.median() == 250.0 and small.worst()[0] == 200.0   # the warm-up reading is left out from three on


@pytest.mark.parametrize("extra", [0, 1])   # an even and an odd number of readings: the middle pair averaged or not
def test_a_huge_run_s_step_summary_is_the_one_python_floats_give(monkeypatch, extra):
    """Issue 16: sorting 700,000 step times as Python floats took 1.9 s of a 200 MiB Megatron log's summary; from BIG
    readings on, numpy sorts the array's own buffer. The summary (median, p90, max, slow steps, a slowdown) is the
    same to the last bit."""
    import statistics
    import parsers.step_series as steps
    from parsers.step_series import _r
    rnd, s = random.Random(9), steps.StepSeries("megatron")
    n = steps.BIG + 20_000 + extra
    for i in range(n):
        v = 1.0 + rnd.random() * 0.05
        s.add(i, v * (1.3 if i > n * 0.6 else 1) * (3 if i % 997 == 0 else 1), i + 1)
    fast = s.summary()
    xs = s.seconds[steps.WARMUP:]
    assert steps._mid(steps._ordered(xs)) == statistics.median(xs) and fast["median_s"] == _r(statistics.median(xs))
    assert fast["p90_s"] == _r(sorted(xs)[int(0.9 * (len(xs) - 1))])
    monkeypatch.setattr(steps, "BIG", 10 ** 9)
    assert fast == s.summary()
    assert fast["slowdown"]["pct"] > 25 and fast["anomalous_steps"] > 100
    assert all(type(fast[k]) is float for k in ("median_s", "p90_s", "max_s"))
    assert all(type(a["line"]) is int and type(a["seconds"]) is float for a in fast["anomalies"])


def test_the_one_match_reading_of_an_hf_dict_agrees_with_the_field_by_field_one(monkeypatch):
    """The usual four keys are read with one compiled match (issue 16); anything else falls through to the field
    reading, and both give the same answer: 4.x bare numbers, 5.x quoted ones, exponents, NaN/Inf, extra keys."""
    import parsers.convergence.lines as ls
    lines = ["{'loss': 2.5015, 'grad_norm': 0.7553, 'learning_rate': 2.0000e-05, 'epoch': 0.01}",
             "{'loss': '6.813', 'grad_norm': '0.6016', 'learning_rate': '0.0003', 'epoch': '0.03125'}\n",
             "{'loss': 3, 'grad_norm': 1e-05, 'learning_rate': 1.9e-05, 'epoch': 2.}  ",
             "{'loss': nan, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'epoch': 0.5}",
             "{'loss': 2.1, 'grad_norm': inf, 'learning_rate': 1e-05, 'epoch': 0.5}",
             "{'loss': 2.1, 'grad_norm': 0.5, 'learning_rate': 1e-05, 'num_tokens': 4096.0, 'epoch': 0.5}",
             "{'loss': 2.1, 'learning_rate': 1e-05, 'epoch': 0.5}"]
    quick = [ls.hf_dict(t) for t in lines]
    assert [ls._HF_PLAIN.match(t) is not None for t in lines] == [True, True, True, False, False, False, False]
    monkeypatch.setattr(ls, "_HF_PLAIN", re.compile(r"(?!)"))
    assert quick == [ls.hf_dict(t) for t in lines] and quick[1] == (6.813, 0.6016, -1.03125, True)


@pytest.mark.parametrize("chunk", [None, 97])   # whole, or cut into small chunks (lines waiting for the next one)
def test_hf_dict_lines_read_straight_from_the_chunk_give_the_line_by_line_answer(engine, monkeypatch, chunk):
    """Issue 16: a line only the loss parser wants and that is a plain HF Trainer dict (after tqdm's carriage-return
    redraws) is read without a Hit, its cleaning or its neighbour lines. Anything else takes the usual path: a NaN
    dict, a colour code, a blank last segment, a line over 8 KiB, a dict another reader also wants, and any line
    while an earlier one waits for the next chunk. The diagnosis is the same either way."""
    import core.ingest as ingest
    from core.ingest import from_bytes
    from parsers.convergence import LossParser
    rnd = random.Random(4)
    lines = []
    for i in range(1, 161):
        loss = 2.4 - i * 0.004 + rnd.random() * 0.02 + (3.0 if i == 120 else 0)
        d = f"{{'loss': {loss:.4f}, 'grad_norm': {0.8 + rnd.random() * 0.1:.4f}, 'learning_rate': 2e-05, 'epoch': {i / 100:.2f}}}"
        bar = "".join(f"\r {i}%|##| {i * 10 + k}/2000 [00:{k:02d}<10:00, 1.9s/it]" for k in range(3))
        if i == 120:   # the spike in colour: read the usual way, so in small chunks the lines after it wait for it
            lines.append("\x1b[31m" + d + "\x1b[0m")
        else:
            lines.append(bar + "\r" + d if i % 3 else d)
        if i == 60:
            lines.append("\x1b[32m" + d + "\x1b[0m")
        if i == 70:
            lines.append(d + "\r   ")
        if i == 80:
            lines.append("x" * 9000 + "\r" + d)
        if i == 90:
            lines.append(d.replace("'grad_norm': 0", "'grad_norm': nan, 'x': 0"))
        if i == 100:
            lines.append(d + "  # NCCL WARN NET/OFI request completed with error")
    text = ("\n".join(lines) + "\n").encode()
    if chunk:
        monkeypatch.setattr(ingest, "SNIFF", chunk)
        monkeypatch.setattr(ingest, "CHUNK", chunk)
    taken = []
    real = LossParser.quick
    monkeypatch.setattr(LossParser, "quick", lambda self, *a: taken.append(a[-1]) or real(self, *a))
    quick = engine.diagnose(from_bytes(text)).to_json_dict()
    monkeypatch.setattr(LossParser, "quick", None)
    plain = engine.diagnose(from_bytes(text)).to_json_dict()
    assert quick["findings"] == plain["findings"] and quick["findings"][0]["symptom"] == "loss_spike"
    assert len(taken) > (140 if chunk is None else 40)   # (in small chunks most lines wait for their next lines)


def test_readings_taken_a_chunk_at_a_time_keep_what_one_at_a_time_keeps():
    """Readings.extend (a chunk's TFLOP/s figures in one findall, issue 16) keeps the same values, first reading
    and lowest one (earliest among equals) as add() one by one, and asks where a reading is only for those two."""
    from parsers.step_series import Readings
    rnd = random.Random(11)
    for _ in range(300):
        values = [float(rnd.choice([400, 410, 415, 420, 3])) for _ in range(rnd.randint(0, 40))]
        one = Readings()
        for k, v in enumerate(values):
            one.add(v, k + 1, f"line {k + 1}")
        many, asked, at = Readings(), [], 0
        while at < len(values):
            n = rnd.randint(1, 9)
            part = values[at:at + n]

            def locate(k, at=at):
                asked.append(at + k)
                return at + k + 1, f"line {at + k + 1}"
            many.extend(part, locate)
            at += n
        assert (many.values, many.first, many.low) == (one.values, one.first, one.low)
        # located: the first reading, then only readings lower than every one before them (after the first)
        assert asked[:1] == ([0] if values else [])
        assert all(values[k] < v for k in asked[1:] for v in values[1:k])
