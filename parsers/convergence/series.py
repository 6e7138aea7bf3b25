"""A loss curve checked for spikes and NaNs as its points arrive, with bounded memory, and the thresholds that say
what a spike is (the loss parser's options)."""
from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass
from statistics import median
from typing import Any


@dataclass(frozen=True)
class SpikeThresholds:
    """The loss parser's options: what counts as a spike (counts are whole numbers, the others ratios)."""
    window: int = 20
    min_history: int = 3
    rel: float = 0.5
    smooth_rel: float = 0.3   # used instead of `rel` when the history is within 2% of its median (an LLM's loss)
    noisy_rel: float = 2.0    # and this when it spreads over 10% (a diffusion loss, per-micro-batch prints)
    mad_k: float = 6.0
    recover_within: int = 20

    def __post_init__(self) -> None:
        if self.min_history > self.window:
            raise ValueError("min_history cannot be larger than window")


ADD_RUN = 512   # the most points Series.add_many takes at once
MIN_RUN = 16    # the fewest; below, points go one by one for a while (a noisy curve)


def _calm(hist, run: list[float], rel1: float) -> bool:
    """Whether add() has nothing to decide for any point of `run` (following the full window `hist`): all finite
    (a sum that is), none above the lowest of hist and run together times `rel1` — which no window's lowest is
    below."""
    return math.isfinite(sum(run)) and max(run) <= min(min(hist), min(run)) * rel1


def line_of(x):
    """The whole log line behind a chunk-wide regex match (prefixes such as [default7]: included)."""
    if isinstance(x, re.Match):
        buf = x.string
        return buf[buf.rfind(b"\n", 0, x.start()) + 1:x.end()]
    return x


# A short paste (1-2 points of history): a point this many times all of it and this much above it is a spike
SHORT_JUMPS = ((10.0, 1.0), (4.0, 2.0))
# ... or a jump the gradient confirms: the loss this many times its top and 1.0 above it, while the grad norm
# reaches GNORM_CONFIRM times the highest one before (a noisy loss does not move its grad norm that much)
SHORT_CONFIRMED_REL1, GNORM_CONFIRM = 1.2, 3.0
SHORT_HISTORY, SHORT_HISTORY_REL1 = 5, 2.0   # under this many points of history with no spread: at least 2x
RISE_RUN = 4       # divergence: this many rises in a row ...
RISE_RATIO = 1.5   # ... ending this many times above where the climb began, and at least 1.0 above it,
RISE_OVER_TOP = 1.3   # and this many times above the highest point of the window where it began (not noise)
# A jump off a falling or flat trend: a point this many times the lowest of the last 3, and more than 8 times the
# window's typical step-to-step change (and 1.0) above it — the median of a falling curve lags the trend, so a spike
# early in training hides under it
TREND_JUMP, TREND_NOISE_K, TREND_MIN_HISTORY = 1.8, 8.0, 5


class Series:
    """One loss curve (per rank prefix), checked for spikes as points arrive; memory stays bounded."""

    def __init__(self, spike: SpikeThresholds) -> None:
        self.min_history, self.rel1, self.mad_k = spike.min_history, 1 + spike.rel, spike.mad_k
        self.smooth_rel1, self.noisy_rel1 = 1 + min(spike.rel, spike.smooth_rel), 1 + max(spike.rel, spike.noisy_rel)
        self.recover_within = spike.recover_within
        self.hist: deque[float] = deque(maxlen=spike.window)
        self.ghist: deque[float] = deque(maxlen=spike.window)
        self.recent: deque[tuple[int, str]] = deque(maxlen=2)
        self.best: dict[str, Any] | None = None
        self.spikes = 0
        self.first_nan: dict[str, Any] | None = None
        self.nan_points = 0
        self.last_finite: float | None = None
        self.last_is_nan = False
        self.climb: tuple[float, int, float] | None = None   # current run of rises: (start, rises, window's top)

    def add(self, v: float, g: float, it: float, no: int, text: str) -> None:
        b = self.best
        if b is not None and b["later_n"] < self.recover_within and math.isfinite(v):
            b["later_n"] += 1
            b["later_min"] = min(b["later_min"], v)
            b["last"] = v
            if len(b["evidence"]) < 4:
                b["evidence"].append((no, line_of(text)))
        if not math.isfinite(v):
            self.nan_points += 1
            self.last_is_nan = True
            if self.first_nan is None:
                self.first_nan = {"line": no, "iteration": it, "last_finite": self.last_finite}
            return
        self.last_is_nan = False
        self._climb(v, g, it, no, text)
        if len(self.hist) >= self.min_history and v > min(self.hist) * self.smooth_rel1:
            med = median(self.hist)  # only when a spike is possible: v must beat the median by `rel`
            if med > 0:
                mad = median(abs(h - med) for h in self.hist) * 1.4826
                noise = mad / med
                # a very smooth curve makes a smaller jump a spike; a very noisy one needs a larger one
                rel1 = self.smooth_rel1 if noise < 0.02 else self.noisy_rel1 if noise > 0.1 else self.rel1
                if mad == 0 and len(self.hist) < SHORT_HISTORY:
                    # three or four points, most of them one repeated value (a progress bar redrawn with the same
                    # postfix): they tell no noise level, so only a doubling counts
                    rel1 = max(rel1, SHORT_HISTORY_REL1)
                if v > med * rel1 and v - med > self.mad_k * max(mad, 0.01 * med):
                    self.spikes += 1
                    if b is not None and b["later_n"] <= 3 and b["later_min"] > b["med"] * 1.2:
                        if v > b["peak"]:  # same episode: keep its onset, follow its peak
                            b["peak"], b["peak_iteration"] = v, it
                    elif b is None or v / med > b["ratio"]:
                        self._record(v, med, g, it, no, text)
        elif self.hist and len(self.hist) < self.min_history and b is None:
            top = max(self.hist)
            # a short paste: one or two points, then a blow-up; or a loss that lives below zero (Dice + CE) jumping
            # well above it
            confirmed = top > 0 and v >= SHORT_CONFIRMED_REL1 * top and v - top >= 1.0 and math.isfinite(g) \
                and bool(self.ghist) and g >= GNORM_CONFIRM * max(self.ghist)
            if (top > 0 and any(v >= r * top and v - top >= d for r, d in SHORT_JUMPS)) or \
                    (top < 0 < v and v - top >= 0.5) or confirmed:
                self.spikes += 1
                self._record(v, median(self.hist) or top, g, it, no, text)
        if self.best is None or self.best["line"] != no:   # (one rule per point: a point is one spike)
            self._trend_jump(v, g, it, no, text)
        self.hist.append(v)
        if math.isfinite(g):
            self.ghist.append(g)
        self.last_finite = v
        self.recent.append((no, text))

    def _climb(self, v: float, g: float, it: float, no: int, text: str) -> None:
        """Gradual divergence: RISE_RUN rises in a row that end RISE_RATIO times above where the climb began (no
        single point need be a spike). A loss that climbs step after step by half again is not noise."""
        last = self.last_finite
        if last is None or v <= last:
            self.climb = None
            return
        start, rises, top = self.climb or (last, 0, max(self.hist, default=last))
        rises += 1
        self.climb = (start, rises, top)
        if rises >= RISE_RUN and start > 0 and v >= RISE_RATIO * start and v - start >= 1.0 and v >= RISE_OVER_TOP * top \
                and (self.best is None or v / start > self.best["ratio"]):
            self.spikes += 1
            self._record(v, start, g, it, no, text)

    def _trend_jump(self, v: float, g: float, it: float, no: int, text: str) -> None:
        h = self.hist
        if len(h) < TREND_MIN_HISTORY:
            return
        low = min(h[-1], h[-2], h[-3])
        if low <= 0 or v < TREND_JUMP * low:
            return
        pts = list(h)
        noise = median(abs(b - a) for a, b in zip(pts, pts[1:]))
        if v - low >= max(1.0, TREND_NOISE_K * noise) and (self.best is None or v / low > self.best["ratio"]):
            self.spikes += 1
            self._record(v, low, g, it, no, text)

    def _climb_after(self, run: list[float]) -> None:
        """The climb state after a calm run taken at once, as _climb() point by point would leave it (a calm run
        stays within smooth_rel of its lowest point, so no climb can end inside it)."""
        i = len(run) - 1
        while i > 0 and run[i] > run[i - 1]:
            i -= 1
        if i == len(run) - 1:
            self.climb = None
        elif i > 0 or self.last_finite is None or run[0] <= self.last_finite:
            # (the window as add() would have held it when the climb began: the points up to run[i], at most maxlen)
            window = [*self.hist, *run[:i + 1]][-(self.hist.maxlen or 1):]
            self.climb = (run[i], len(run) - 1 - i, max(window))
        else:   # the whole run rises, from the point before it
            start, rises, top = self.climb or (self.last_finite, 0, max(self.hist, default=self.last_finite))
            self.climb = (start, rises + len(run), top)

    def add_many(self, vs: list[float], gs: list[float], its: list[int], nos: list[int], texts: list) -> None:
        """Points in order, exactly as add() one by one would take them. Where add() has nothing to decide — the
        window full, no spike being followed, finite points no higher than the window's lowest by the smallest spike
        ratio — a run of points is taken at once (runs halve down to MIN_RUN around a point that may be a spike);
        every other point goes through add()."""
        n, k, full, size = len(vs), 0, self.hist.maxlen, ADD_RUN
        one_by_one = 0   # points still to take through add(): on a noisy curve, looking ahead does not pay
        while k < n:
            b = self.best
            if one_by_one or len(self.hist) < full or (b is not None and b["later_n"] < self.recover_within):
                self.add(vs[k], gs[k], its[k], nos[k], texts[k])
                k += 1
                one_by_one = max(0, one_by_one - 1)
                continue
            run = vs[k:k + size]
            if not _calm(self.hist, run, self.smooth_rel1):
                if size > MIN_RUN:
                    size //= 2
                else:
                    one_by_one, size = 4 * MIN_RUN, ADD_RUN
                continue
            c = k + len(run)
            self._climb_after(run)   # (before the window takes the run: it looks at the window as it was)
            self.hist.extend(run)
            self.ghist.extend(g for g in gs[k:c] if math.isfinite(g))
            self.last_finite, self.last_is_nan = run[-1], False
            self.recent.extend(zip(nos[max(k, c - 2):c], texts[max(k, c - 2):c]))
            k, size = c, min(ADD_RUN, 2 * size)

    def __getstate__(self) -> dict:
        """For a worker process's answer (engine.split): the kept lines cut out of their chunk (a match cannot be
        pickled, and holding it would pin the chunk)."""
        state = dict(self.__dict__)
        state["recent"] = deque(((no, line_of(t)) for no, t in self.recent), maxlen=self.recent.maxlen)
        return state

    def last_line(self) -> int:
        """The line of the last finite point (0 before any)."""
        return self.recent[-1][0] if self.recent else 0

    def _record(self, v: float, med: float, g: float, it: float, no: int, text: str) -> None:
        ratio = v / med if med > 0 else 1 + (v - med) / abs(med or 1.0)   # a loss that lives below zero
        self.best = {"ratio": ratio, "med": med, "value": v, "line": no, "iteration": it,
                     "gnorm": g, "gnorm_before": median(self.ghist) if self.ghist else None,
                     "evidence": [(n, line_of(x)) for n, x in (*self.recent, (no, text))],
                     "later_n": 0, "later_min": math.inf, "peak": v, "peak_iteration": it, "last": v}
