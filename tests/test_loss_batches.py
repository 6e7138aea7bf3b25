"""Megatron iteration lines read in batches (issue 16): the curve, the step series and the whole loss reader end in
the same state as when every point is taken one by one."""
import math
import random

import pytest

from parsers import step_series
from parsers.convergence import bulk as loss_bulk
from parsers.convergence import series as loss_series
from parsers.convergence import LossParser
from parsers.convergence.bulk import read_chunk
from parsers.convergence.series import Series, SpikeThresholds
from parsers.step_series import StepSeries


def _state(s: Series) -> dict:
    return s.__getstate__()


def _curve(rnd: random.Random, n: int, kind: str) -> list[float]:
    out, base = [], 3.0
    for i in range(n):
        base = max(0.5, base - 0.0005)
        noise = {"smooth": 0.002, "noisy": 0.4, "llm": 0.02}[kind]
        v = base * (1 + rnd.uniform(-noise, noise))
        r = rnd.random()
        if r < 0.004:
            v *= rnd.choice([1.4, 2.5, 8.0])          # a spike, of several sizes
        elif r < 0.006:
            v = rnd.choice([math.nan, math.inf, -math.inf])
        out.append(v)
    return out


@pytest.mark.parametrize("kind", ["smooth", "noisy", "llm"])
@pytest.mark.parametrize("seed", range(4))
def test_a_curve_taken_in_batches_ends_as_point_by_point(kind, seed, monkeypatch):
    rnd = random.Random(seed)
    if seed % 2:   # short runs, halved down to two points
        monkeypatch.setattr(loss_series, "ADD_RUN", 64)
        monkeypatch.setattr(loss_series, "MIN_RUN", 2)
    vs = _curve(rnd, 3000, kind)
    gs = [rnd.choice([0.3, 0.25, math.nan]) if rnd.random() < 0.05 else 0.3 for _ in vs]
    texts = [f"line {i}" for i in range(len(vs))]
    one, many = Series(SpikeThresholds()), Series(SpikeThresholds())
    for k, v in enumerate(vs):
        one.add(v, gs[k], k, k + 1, texts[k])
    k = 0
    while k < len(vs):
        n = rnd.choice([1, 2, 5, 40, 700])
        many.add_many(vs[k:k + n], gs[k:k + n], list(range(k, k + n)), list(range(k + 1, k + n + 1)), texts[k:k + n])
        k += n
    assert _state(many) == _state(one)
    assert one.spikes > 0 and one.nan_points > 0   # the curve did exercise both


def test_step_readings_taken_in_batches_are_kept_as_one_by_one(monkeypatch):
    monkeypatch.setattr(step_series, "MAX_POINTS", 200)
    rnd = random.Random(3)
    rows = [(i // rnd.choice([1, 1, 2]), rnd.choice([3.0, 3.1, 0.0, -1.0, math.nan, 2.9]), i + 10) for i in range(500)]
    one, many = StepSeries("megatron"), StepSeries("megatron")
    for it, sec, no in rows:
        one.add(it, sec, no)
    for k in range(0, len(rows), 37):
        part = rows[k:k + 37]
        many.add_many([r[0] for r in part], [r[1] for r in part], [r[2] for r in part])
    assert (many.seconds, many.iters, many.lines) == (one.seconds, one.iters, one.lines)
    assert len(one) == 200   # the cap was reached


def _megatron(rnd: random.Random) -> bytes:
    lines, loss = [], 2.5
    for it in range(1, 1500):
        loss = max(1.0, loss - 0.0004) * (1 + rnd.uniform(-0.01, 0.01))
        shown = 9.5 if it == 900 else loss
        g = "nan" if it in (400, 401) else f"{0.3 + rnd.random() * 0.01:.3f}"
        nans = 1 if it == 1200 else 0
        line = (f" iteration {it:8d}/ 9000 | consumed samples: {it * 512:12d} | elapsed time per iteration (ms): "
                f"{3000 + rnd.random() * 50:.1f} | learning rate: 1.000E-04 | global batch size:   512 | "
                f"lm loss: {shown:.6E} | loss scale: 1.0 | grad norm: {g} | number of skipped iterations:   0 | "
                f"number of nan iterations: {nans:3d} |")
        if it == 700:
            line = line.replace("lm loss:", "lm_loss:")            # GPT-NeoX's spelling
        if it == 800:
            line = line.replace("(ms): ", "(ms): n/a")             # a step time that does not parse
        if it == 1000:
            line = line.replace(" | grad norm: ", " | grad_norm_x: ")   # no grad norm
        ranks = 3 if it % 5 == 0 else 1                             # other ranks print the same step
        lines += [f"[rank{r}]:{line}" if ranks > 1 else line for r in range(ranks)]
        if it == 1100:
            lines.append(f"[rank1]:{line.replace(f'{shown:.6E}', f'{shown * 1.01:.6E}')}")   # same step, own loss
    return ("\n".join(lines) + "\n").encode()


def _read(buf: bytes, chunk: int, batched: bool) -> LossParser:
    p = LossParser()
    no, at = 0, 0
    while at < len(buf):
        end = buf.rfind(b"\n", at, at + chunk) + 1 or len(buf)
        part = buf[at:end]
        if batched:
            read_chunk(p, part, no)
        else:
            n, pos = no, 0
            for m in p.bulk.finditer(part):
                n += part.count(b"\n", pos, m.start())
                pos = m.start()
                p.feed_bulk(n + 1, m)
        no += part.count(b"\n")
        at = end
    return p


def _parser_state(p: LossParser) -> dict:
    d = {k: v for k, v in vars(p).items() if k not in ("series", "bulk_series", "steps", "spike", "scale")}
    d["scale"] = {k: v for k, v in vars(p.scale).items() if k != "ev"}
    d["series"] = {k: s.__getstate__() for k, s in p.series.items()}
    d["steps"] = (p.steps.seconds, p.steps.iters, p.steps.lines)
    d["evidence"] = [(e.line, e.text) for box in (p.nan_ev, p.gnan_ev, p.scale.ev) for e in box.items]
    return {k: v for k, v in d.items() if not k.endswith("_ev")}


@pytest.mark.parametrize("chunk,batch", [(997, 4096), (64 << 10, 4096), (64 << 10, 3)])
def test_the_loss_reader_ends_the_same_with_batches_as_line_by_line(chunk, batch, monkeypatch):
    monkeypatch.setattr(loss_bulk, "BATCH", batch)
    buf = _megatron(random.Random(5))
    batched, plain = _read(buf, chunk, True), _read(buf, chunk, False)
    assert _parser_state(batched) == _parser_state(plain)
    s = plain.series[""]
    assert s.best and s.best["iteration"] == 900 and plain.grad_nan == 2 and plain.nan_iters == 1
    assert len(plain.steps) > 1400


def test_hf_points_gathered_by_the_quick_lane_reach_the_curve_before_it_is_read_or_sent():
    """quick() gathers HF dict points; they are on the curve before the next feed(), seen(), finish(), and when a
    worker process sends the reader back (pickled)."""
    import pickle

    from parsers.scan.base import Context, Hit
    lines = [f"{{'loss': {2.0 - i * 0.001:.4f}, 'grad_norm': 0.5, 'learning_rate': 2e-05, 'epoch': {i / 100:.2f}}}"
             for i in range(60)] + ["{'loss': 9.5, 'grad_norm': 0.5, 'learning_rate': 2e-05, 'epoch': 0.61}"]
    buf = ("\n".join(lines) + "\n").encode()

    def quick_all(p):
        at = 0
        for no, line in enumerate(lines, 1):
            assert p.quick(buf, at, at + len(line), no)
            at += len(line) + 1

    p = LossParser()
    quick_all(p)
    sent = pickle.loads(pickle.dumps(p))
    assert sent.series[""].spikes == 1 and sent.hf_batch == []
    p = LossParser()
    quick_all(p)
    assert p.seen()   # the spike is seen (progress lines) without waiting for the end
    p = LossParser()
    quick_all(p)
    p.feed(Hit(62, "{'loss': nan, 'grad_norm': nan, 'learning_rate': 2e-05, 'epoch': 0.62}"))
    s = p.series[""]
    assert s.spikes == 1 and s.first_nan["line"] == 62 and s.last_finite == 9.5
    assert [f.symptom for f in LossParser().finish(Context())] == []
    q = LossParser()
    quick_all(q)
    assert [f.symptom for f in q.finish(Context())] == ["loss_spike"]
