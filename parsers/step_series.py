"""Step times from any format that prints them, summarised as facts about the run even when no symptom fires:
the typical step, steps far slower than it (> median + 3 robust deviations, and at least 10% over the median) and
a sustained slowdown (the second part of the run at least 10% slower than the first, at the split that shows it
best). The first steps are left out as warm-up (compilation, the first batches, NCCL set-up)."""
from __future__ import annotations

from array import array
from statistics import median
from typing import Any

MIN_STEPS = 8        # fewer readings say nothing about a series
WARMUP = 2           # leading readings left out
MAX_POINTS = 2_000_000
ANOMALY_K = 3.0      # robust deviations (1.4826 · MAD) above the median
ANOMALY_MIN = 1.10   # and at least this much slower than the median
SHIFT_MIN = 1.10     # a sustained slowdown: the later part's median over the earlier part's
SHIFT_SIDE = 8       # points each side of a split, at least
SHIFT_Z = 4.0        # how many standard errors the two medians must differ by
SPLITS = 50          # candidate split points tried first (then the neighbourhood of the best)
SHOWN = 10           # anomalous steps listed
THIN_TO = 2_000      # points the slowdown search looks at
BIG = 100_000        # readings from which a median is taken in numpy rather than over Python floats


class StepSeries:
    """(iteration or None, seconds, line) readings from one source (one log format), in log order."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.seconds = array("d")
        self.iters = array("q")   # -1: the line named no iteration (8 bytes a reading: a long run has millions)
        self.lines = array("q")

    def add(self, iteration: int | None, seconds: float, line: int) -> None:
        if len(self.seconds) >= MAX_POINTS or not seconds > 0:
            return
        if iteration is not None and self.iters and self.iters[-1] == iteration:
            return   # the same step printed by another rank
        self.seconds.append(seconds)
        self.iters.append(-1 if iteration is None or iteration < 0 else iteration)
        self.lines.append(line)

    def add_many(self, iterations: list[int], seconds: list[float], lines: list[int]) -> None:
        """Readings in order, each with its iteration (>= 0), kept as add() one by one would keep them."""
        last = self.iters[-1] if self.iters else None
        keep_s, keep_i, keep_l = array("d"), array("q"), array("q")
        for it, sec, no in zip(iterations, seconds, lines):
            if sec > 0 and it != last:
                keep_s.append(sec)
                keep_i.append(it)
                keep_l.append(no)
                last = it
        room = max(0, MAX_POINTS - len(self.seconds))
        self.seconds.extend(keep_s[:room])
        self.iters.extend(keep_i[:room])
        self.lines.extend(keep_l[:room])

    def __len__(self) -> int:
        return len(self.seconds)

    def _where(self, i: int) -> dict[str, Any]:
        out: dict[str, Any] = {"line": self.lines[i]}
        if self.iters[i] >= 0:
            out["iteration"] = self.iters[i]
        return out

    def summary(self) -> dict[str, Any] | None:
        if len(self) < MIN_STEPS + WARMUP:
            return None
        xs = self.seconds[WARMUP:]
        ordered = _ordered(xs)
        med = _mid(ordered)
        shift = _slowdown(xs)
        # slow steps are judged against their own part of the run: after a lasting slowdown every step is slower
        parts = [(0, len(xs))] if shift is None else [(0, shift[0]), (shift[0], len(xs))]
        slow = [i + WARMUP for a, b in parts for i in _outliers(xs, a, b)]
        out: dict[str, Any] = {
            "source": self.source, "steps": len(xs), "warmup_left_out": WARMUP, "median_s": _r(med),
            "p90_s": _r(float(ordered[int(0.9 * (len(ordered) - 1))])), "max_s": _r(float(ordered[-1])),
            "anomalous_steps": len(slow),
            "anomalies": [{**self._where(i), "seconds": _r(self.seconds[i]), "x_median": round(self.seconds[i] / med, 2)}
                          for i in sorted(slow, key=lambda i: -self.seconds[i])[:SHOWN]],
        }
        if shift is not None:
            k, before, after = shift
            out["slowdown"] = {**self._where(k + WARMUP), "before_s": _r(before), "after_s": _r(after),
                               "pct": round(100 * (after / before - 1), 1)}
        return out


class Readings:
    """Values of one kind (MFU, TFLOP/s per GPU) in log order, with bounded memory: the values (8 bytes each) and
    the line of only the first reading and of the lowest one after it, the evidence a finding quotes."""

    def __init__(self) -> None:
        self.values = array("d")
        self.first: tuple[float, int, str] | None = None
        self.low: tuple[float, int, str] | None = None

    def add(self, value: float, line: int, text: str) -> None:
        if self.first is None:
            self.first = (value, line, text)
        elif self.low is None or value < self.low[0]:
            self.low = (value, line, text)
        if len(self.values) < MAX_POINTS:
            self.values.append(value)

    def extend(self, values: list[float], locate) -> None:
        """Many readings at once, as add() would keep them one by one: `locate(k)` gives the line number and text of
        the k-th, asked only for the first reading and a new lowest one."""
        if not values:
            return
        k0 = 0
        if self.first is None:
            self.first, k0 = (values[0], *locate(0)), 1
        rest = values[k0:]
        low = min(rest, default=None)
        if low is not None and (self.low is None or low < self.low[0]):
            self.low = (low, *locate(k0 + rest.index(low)))
        self.values.extend(values[:max(0, MAX_POINTS - len(self.values))])

    def __len__(self) -> int:
        return len(self.values)

    def kept(self):
        """The readings that count: from three on, the first (warm-up) is left out."""
        return self.values[1:] if len(self) >= 3 else self.values

    def median(self) -> float:
        """The kept readings' median, exact. Millions of readings would make millions of Python floats to sort
        (80 MB for a 1 GB log): numpy sorts the array's own buffer instead."""
        kept = self.kept()
        if len(kept) < BIG:
            return median(kept)
        import numpy as np
        return float(np.median(np.frombuffer(kept, dtype=np.float64)))

    def worst(self) -> tuple[float, int, str] | None:
        if len(self) >= 3 or (self.low is not None and self.first is not None and self.low[0] <= self.first[0]):
            return self.low
        return self.first


def _ordered(xs):
    """The readings sorted: a list, or for a long run numpy's sort of the array's own buffer (sorting a million
    Python floats takes a second, several times over in a summary)."""
    if len(xs) < BIG:
        return sorted(xs)
    import numpy as np
    return np.sort(np.frombuffer(xs, dtype=np.float64))


def _mid(ordered) -> float:
    """The median of sorted readings, as statistics.median takes it (the mean of the middle two of an even count)."""
    n = len(ordered)
    i = n // 2
    return float(ordered[i]) if n % 2 else (float(ordered[i - 1]) + float(ordered[i])) / 2


def _outliers(xs, a: int, b: int) -> list[int]:
    part = xs[a:b]
    med = _mid(_ordered(part))
    if len(part) < BIG:
        sigma = 1.4826 * median(abs(x - med) for x in part)
        limit = max(med + ANOMALY_K * sigma, med * ANOMALY_MIN)
        return [a + i for i, x in enumerate(part) if x > limit]
    import numpy as np
    arr = np.frombuffer(part, dtype=np.float64)
    sigma = 1.4826 * _mid(np.sort(np.abs(arr - med)))
    limit = max(med + ANOMALY_K * sigma, med * ANOMALY_MIN)
    return (np.flatnonzero(arr > limit) + a).tolist()


def _r(x: float) -> float:
    return round(x, 4 if x < 1 else 3)


def _slowdown(xs) -> tuple[int, float, float] | None:
    """Where the run changes speed for good: the split (first point of the later part) that best fits two flat
    parts (least absolute deviation from each part's median), kept when the later part is ≥ SHIFT_MIN slower.
    Medians make single slow steps count for nothing; only a lasting change moves them. A long run is thinned to
    THIN_TO points first, so the split is then exact to within the thinning step."""
    every = max(1, -(-len(xs) // THIN_TO))
    ys = list(xs[::every])
    n = len(ys)
    if n < 2 * SHIFT_SIDE:
        return None
    step = max(1, (n - 2 * SHIFT_SIDE) // SPLITS)
    coarse = min(range(SHIFT_SIDE, n - SHIFT_SIDE + 1, step), key=lambda k: _cost(ys, k))
    k = min(range(max(SHIFT_SIDE, coarse - step + 1), min(n - SHIFT_SIDE, coarse + step - 1) + 1),
            key=lambda k: _cost(ys, k))
    before, after = median(ys[:k]), median(ys[k:])
    # and far beyond what noise moves a median by (the standard error of a median is 1.25 σ/√n; many splits were
    # tried, hence SHIFT_Z): a short or noisy run cannot pass noise for a slowdown
    sigma = 1.4826 * median([abs(y - before) for y in ys[:k]] + [abs(y - after) for y in ys[k:]])
    if before > 0 and after >= before * SHIFT_MIN and after - before > SHIFT_Z * 1.25 * sigma * (1 / k + 1 / (n - k)) ** 0.5:
        return k * every, before, after
    return None


def _cost(ys: list[float], k: int) -> float:
    a, b = median(ys[:k]), median(ys[k:])
    return sum(abs(y - a) for y in ys[:k]) + sum(abs(y - b) for y in ys[k:])


def pick(series: list[StepSeries]) -> dict[str, Any] | None:
    """The summary of the source with the most readings (formats are never mixed in one series)."""
    best = max(series, key=len, default=None)
    return best.summary() if best is not None else None
