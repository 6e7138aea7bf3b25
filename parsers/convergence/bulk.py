"""The loss parser's chunk-wide reading of Megatron iteration lines (a plain Megatron log: most of its lines).

An ordinary line — the loss and grad norm finite, no NaN iterations counted, the curve already set up — only has
its point and step time gathered; the curve and the step series take each batch in one call (Series.add_many,
StepSeries.add_many), with the same result as one call per line. Any other line, and every line whose numbers do
not parse, goes to `LossParser.feed_bulk` (read_line) after the batch so far, so each series keeps its order."""
from __future__ import annotations

import math

from parsers.scan.base import Hit, unprefix
from parsers.convergence.lines import ELAPSED, megatron_fields
from parsers.convergence.series import line_of

_LOSS = b"lm loss:"
_GNORM = b"grad norm:"
_NANS = b"nan iterations:"
_ELAPSED = ELAPSED.encode()
_ELAPSED_N = len(_ELAPSED)
BATCH = 4096   # points gathered at most (each holds its line's match)


class _BulkHit:
    """A line read by the chunk-wide pass."""
    __slots__ = ("no", "_raw")
    label = cut = ""   # the whole line is read as it is (launcher prefixes included)

    def __init__(self, no: int, raw: bytes):
        self.no, self._raw = no, raw

    @property
    def text(self) -> str:   # the program's own line, as a Hit's (evidence looks the same whichever path read it)
        return unprefix(self._raw.decode("utf-8", "replace"))[2]

    raw = text


def read_line(p, no: int, m) -> None:
    """One iteration line into parser `p`, every case: a NaN or Inf loss or grad norm, NaN iterations counted, no
    loss (the line-by-line reading), lm_loss, the curve's first point, and another rank's copy of the last step."""
    it_b, rest = m.group(1, 2)
    k = rest.find(_LOSS)
    if k < 0 or it_b == p.bulk_it:   # (GPT-NeoX spells it lm_loss)
        k = k if k >= 0 else rest.find(b"lm_loss:")
        e = rest.find(b"|", k)
        if k >= 0 and it_b == p.bulk_it and rest[k + 8:e if e >= 0 else len(rest)] == p.bulk_loss:
            return   # the same step as another rank printed it (the one bulk curve has a point per step)
    it = int(it_b)
    e = rest.find(_ELAPSED)
    if e >= 0:   # (the line-by-line path's _elapsed, inlined)
        try:
            p.steps.add(it, float(rest[e + _ELAPSED_N:rest.find(b"|", e)]) / 1000, no)
        except ValueError:
            pass
    if k < 0:  # an iteration line without a loss (grad norm only, NaN counts): the line-by-line reading
        p.feed(Hit(no, line_of(m).decode("utf-8", "replace")))
        return
    e = rest.find(b"|", k)
    p.bulk_it, p.bulk_loss = it_b, (loss := rest[k + 8:e if e >= 0 else len(rest)])
    i = rest.find(_GNORM)
    j = rest.find(_NANS)
    try:
        v = float(loss)
        g = float(rest[i + 10:rest.find(b"|", i)]) if i >= 0 else math.nan
    except ValueError:
        return
    if v != v or v in (math.inf, -math.inf) or (i >= 0 and not math.isfinite(g)) or \
            (j >= 0 and rest[j + 15:rest.find(b"|", j)].strip(b" 0")):
        text = line_of(m).decode("utf-8", "replace")  # rare NaN/Inf lines take the general path for evidence
        fields = megatron_fields(text)
        if fields:
            p._megatron(_BulkHit(no, line_of(m)), fields, text, key="")  # the bulk series is one curve
        return
    if p.bulk_series is None:   # one curve, going on from the one read line by line until now (its history)
        if p.series and "" not in p.series:   # a rank's own curve: the latest one read
            p.series[""] = p.series.pop(max(p.series, key=lambda k: p.series[k].last_line()))
        p.bulk_series = p._series("")
    p.bulk_series.add(v, g, it, no, m)  # the line itself is cut out only if it becomes evidence


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
