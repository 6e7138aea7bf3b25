"""Step times printed as a key and a number — NeMo's `train_step_timing in s`, and `step_time` / `iter_time` /
`iteration_time` in dict or key=value logs — as a step-time series (parsers/step_series.py). Megatron's
`elapsed time per iteration (ms)` is read by the loss parser, which already reads those lines. Finds no symptom."""
from __future__ import annotations

from parsers.scan.base import Collector, Context, Hit, rx, search
from parsers.step_series import StepSeries

# the key, an optional unit inside it (step_time_ms, "in s"), the number, an optional unit after it
_TIME = rx(r"(?i)(?<![\w.])(?:train_)?(step_time|iter_time|iteration_time|train_step_timing)(?:_(ms|s|sec))?"
           r"(?:\s+in\s+(s|ms))?['\"]?\s*[:=]\s*['\"]?(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(ms|s)?(?![\w.])")
_ITER = rx(r"(?i)(?<![\w.])(?:iteration|global_step|step)['\"]?\s*[:=]?\s*['\"]?(\d+)(?:\.0+)?(?![\d.])")   # NeMo: 30.0


class StepTimeCollector(Collector):
    name = "step_time"
    triggers = ("step_time", "iter_time", "iteration_time", "train_step_timing")

    def __init__(self) -> None:
        self.series = StepSeries("step_time")

    def feed(self, hit: Hit) -> None:
        t = hit.text
        m = search(_TIME, t)
        if not m:
            return
        unit = (m.group(2) or m.group(3) or m.group(5) or "s").lower()
        it = search(_ITER, t[:m.start()] + " " + t[m.end():])
        if not len(self.series):
            self.series.source = m.group(1).lower()   # the key that started the series names it
        self.series.add(int(it.group(1)) if it else None, float(m.group(4)) / (1000 if unit == "ms" else 1), hit.no)

    def collect(self, ctx: Context) -> None:
        if len(self.series):
            ctx.step_series.append(self.series)


COLLECTOR = StepTimeCollector
