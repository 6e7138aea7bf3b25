"""The loss parser's chunk-wide reading of Megatron iteration lines (a plain Megatron log: most of its lines).

An ordinary line — the loss and grad norm finite, no NaN iterations counted, the curve already set up — only has
its point and step time gathered; the curve and the step series take each batch in one call (Series.add_many,
StepSeries.add_many), with the same result as one call per line. Any other line, and every line whose numbers do
not parse, goes to `LossParser.feed_bulk` after the batch so far, so each series keeps its order."""
from __future__ import annotations

import math

from parsers.loss_lines import ELAPSED

_LOSS = b"lm loss:"
_GNORM = b"grad norm:"
_NANS = b"nan iterations:"
_ELAPSED = ELAPSED.encode()
_ELAPSED_N = len(_ELAPSED)
BATCH = 4096   # points gathered at most (each holds its line's match)


def read_chunk(p, buf: bytes, start_no: int) -> None:
    """Feed parser `p` (a LossParser) every match of its bulk pattern in `buf`, whose first line is start_no + 1."""
    count, isfinite, nan = buf.count, math.isfinite, math.nan
    vs: list[float] = []
    gs: list[float] = []
    its: list[int] = []
    nos: list[int] = []
    ms: list = []
    step_its: list[int] = []
    secs: list[float] = []
    step_nos: list[int] = []

    def flush() -> None:
        if secs:
            p.steps.add_many(step_its, secs, step_nos)
        if vs:
            p.bulk_series.add_many(vs, gs, its, nos, ms)
        for batch in (step_its, secs, step_nos, vs, gs, its, nos, ms):
            batch.clear()

    no, at = start_no, 0
    for m in p.bulk.finditer(buf):
        start = m.start()
        no += count(b"\n", at, start)
        at = start
        it_b, rest = m.group(1, 2)
        k = rest.find(_LOSS)
        if k >= 0 and p.bulk_series is not None:
            e = rest.find(b"|", k)
            loss = rest[k + 8:e if e >= 0 else len(rest)]
            if it_b == p.bulk_it and loss == p.bulk_loss:
                continue   # the same step as another rank printed it
            i = rest.find(_GNORM)
            j = rest.find(_NANS)
            el = rest.find(_ELAPSED)
            try:
                v = float(loss)
                g = float(rest[i + 10:rest.find(b"|", i)]) if i >= 0 else nan
                sec = float(rest[el + _ELAPSED_N:rest.find(b"|", el)]) / 1000 if el >= 0 else None
            except ValueError:
                sec = v = nan   # (read below, the general way)
            if isfinite(v) and (i < 0 or isfinite(g)) and not (j >= 0 and rest[j + 15:rest.find(b"|", j)].strip(b" 0")):
                it = int(it_b)
                if sec is not None:
                    step_its.append(it)
                    secs.append(sec)
                    step_nos.append(no + 1)
                p.bulk_it, p.bulk_loss = it_b, loss
                vs.append(v)
                gs.append(g)
                its.append(it)
                nos.append(no + 1)
                ms.append(m)
                if len(ms) >= BATCH:
                    flush()
                continue
        flush()
        p.feed_bulk(no + 1, m)
    flush()
