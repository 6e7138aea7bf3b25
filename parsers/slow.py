"""The slow family: jobs that run, but slowly. slow_input: the step waits on its input pipeline, read from

- a torch.profiler `key_averages().table()` in which the DataLoader's `enumerate(DataLoader)#…__next__` row holds a
  large share of the profiled CPU time (the GPU idles meanwhile), or
- per-step timings that name the data time: mmengine/timm `time: T … data_time: D` (D is part of T), or a loop's
  own `load_data_time: D, train_step_time: S` (D comes on top of S). Stalls every few steps count, so the share
  is total data time over total step time across the lines read."""
from __future__ import annotations

from core.models import Finding
from parsers.base import Context, Hit, Parser, findall, rx, search

INPUT_BAD_PCT = 25.0   # a quarter of the step spent fetching data is a bottleneck worth the first look

_HEADER = rx(r"^\s*Name\s+Self CPU %\s+Self CPU\s+CPU total %\s+CPU total\b")
_DATALOADER_ROW = rx(r"^\s*(enumerate\(DataLoader\)\S*)\s+([\d.]+)%\s+\S+\s+([\d.]+)%\s+([\d.]+)(us|ms|s)\b")
_TOTAL = rx(r"^Self CPU time total:\s*([\d.]+)(us|ms|s)\b")
_TO_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0}


class InputParser(Parser):
    name = "slow_input"
    triggers = ("Self CPU %", "enumerate(DataLoader)", "Self CPU time total")

    def __init__(self) -> None:
        super().__init__()
        self.in_table = False
        self.share: float | None = None
        self.row = ""
        self.total_ms: float | None = None

    def feed(self, hit: Hit) -> None:
        t = hit.text
        if search(_HEADER, t):
            self.in_table = True
            return
        if not self.in_table:
            return
        m = search(_DATALOADER_ROW, t)
        if m:
            share = float(m.group(3))
            if self.share is None or share > self.share:
                self.share, self.row = share, m.group(1)
                if share > INPUT_BAD_PCT:
                    self.ev.add(hit.no, t)
            return
        m = search(_TOTAL, t)
        if m:
            self.total_ms = round(float(m.group(1)) * _TO_MS[m.group(2)], 3)

    def finish(self, ctx: Context) -> list[Finding]:
        if self.share is None or self.share <= INPUT_BAD_PCT:
            return []
        facts = {"input_share_pct": self.share, "input_row": self.row}
        if self.total_ms is not None:
            facts["profile_total_ms"] = self.total_ms
        title = (f"The step waits on input data: the DataLoader holds {self.share:g}% of the profiled CPU time "
                 "while the GPU idles")
        return [Finding(symptom="slow_input", rule="slow_input.profiler_dataloader", title=title,
                        severity="warning", confidence=0.8, evidence=self.ev.items, facts=facts,
                        first_line=self.ev.first())]


# (data key, step key, whether the step time already includes the data time)
_TIMING = rx(r"(?i)\b(load_data_time|data_load_time|data_time|data_s|data)\s*[:=]\s*(\d+(?:\.\d+)?)")
_STEP = rx(r"(?i)(?<![\w.])(train_step_time|step_time|compute_time|updt_s|batch_time|iter_time|time)\s*[:=]\s*"
           r"(\d+(?:\.\d+)?)")
_ITER = rx(r"(?i)\biter\w*\W{0,3}(\d+)\s*/\s*\d+|\[\s*(\d+)\s*/\s*\d+\]")
MIN_STEPS = 3


class StepTimingParser(Parser):
    name = "slow_input_steps"
    triggers = ("data_time", "load_data_time", "data_load_time", "data: ", "data_s:")

    def __init__(self) -> None:
        super().__init__()
        self.readings: list[tuple[float, float]] = []
        self.iters: list[int | None] = []
        self.first_line: tuple[int, str] = (0, "")
        self.worst: tuple[float, int, str] | None = None

    def feed(self, hit: Hit) -> None:
        t = hit.text
        d = search(_TIMING, t)
        st = search(_STEP, t) if d else None
        if not st or st.start() == d.start():
            return
        dv, sv = float(d.group(2)), float(st.group(2))
        inclusive = st.group(1).lower() in ("time", "batch_time", "iter_time")
        total = sv if inclusive else sv + dv
        if total <= 0 or dv > total:
            return
        if not self.readings:
            self.first_line = (hit.no, t)
        self.readings.append((dv, total))
        it = search(_ITER, t)
        self.iters.append(int(it.group(1) or it.group(2)) if it else None)
        if len(self.readings) > 1 and (self.worst is None or dv / total > self.worst[0]):
            self.worst = (dv / total, hit.no, t)

    def _warm_up(self) -> int:
        """How many leading readings to leave out: the first logged step also waits for the workers to start and
        the first batch to be read, unless the excerpt starts mid-run (its iteration past the first log interval)."""
        first, second = self.iters[0], self.iters[1]
        if first is not None and second is not None and second > first and first > second - first:
            return 0
        return 1

    def finish(self, ctx: Context) -> list[Finding]:
        if len(self.readings) < MIN_STEPS or self.worst is None:
            return []
        skip = self._warm_up()
        if skip == 0 and self.readings[0][0] / self.readings[0][1] > self.worst[0]:
            self.worst = (self.readings[0][0] / self.readings[0][1], *self.first_line)
        self.steps = len(self.readings) - skip
        data, total = (sum(r[i] for r in self.readings[skip:]) for i in (0, 1))
        share = round(100 * data / total, 1) if total else 0.0
        if share <= INPUT_BAD_PCT:
            return []
        self.ev.add(self.worst[1], self.worst[2])
        facts = {"input_share_pct": share, "steps_read": self.steps,
                 "worst_step_input_pct": round(100 * self.worst[0], 1)}
        title = (f"The step waits on input data: data loading takes {share:g}% of the step time over "
                 f"{self.steps} logged steps")
        return [Finding(symptom="slow_input", rule="slow_input.step_timing", title=title, severity="warning",
                        confidence=0.75, evidence=self.ev.items, facts=facts, first_line=self.ev.first())]


# Megatron's timers: either one line "time (ms) | forward-compute: F | ... | batch-generator: B" or, with
# --timing-log-level, a "(min, max) time across ranks (ms):" block with one "name ....: (min, max)" line per timer.
_MEGATRON_TIMER = rx(r"(forward-backward|forward-compute|backward-compute|batch-generator)\s*\.*:\s*"
                     r"(?:\(\s*[\d.]+,\s*([\d.]+)\)|([\d.]+))")


class MegatronTimerParser(Parser):
    name = "slow_input_megatron"
    triggers = ("batch-generator", "forward-backward", "forward-compute", "backward-compute")

    def __init__(self) -> None:
        super().__init__()
        self.block: dict[str, float] = {}
        self.shares: list[tuple[float, int, str]] = []
        self.bg_line: tuple[int, str] | None = None

    def _close(self) -> None:
        b = self.block
        step = b.get("forward-backward") or (b.get("forward-compute", 0.0) + b.get("backward-compute", 0.0))
        if "batch-generator" in b and step > 0 and self.bg_line:
            self.shares.append((min(1.0, b["batch-generator"] / step), *self.bg_line))
        self.block, self.bg_line = {}, None

    def feed(self, hit: Hit) -> None:
        for m in findall(_MEGATRON_TIMER, hit.text):
            name = m.group(1)
            if name in self.block:
                self._close()
            self.block[name] = float(m.group(2) or m.group(3))
            if name == "batch-generator":
                self.bg_line = (hit.no, hit.text)

    def finish(self, ctx: Context) -> list[Finding]:
        self._close()
        if not self.shares:
            return []
        share = round(100 * sum(s for s, _, _ in self.shares) / len(self.shares), 1)
        if share <= INPUT_BAD_PCT:
            return []
        worst = max(self.shares)
        self.ev.add(worst[1], worst[2])
        title = (f"The step waits on input data: Megatron's batch-generator takes {share:g}% of forward-backward "
                 f"over {len(self.shares)} timer report(s)")
        return [Finding(symptom="slow_input", rule="slow_input.megatron_timers", title=title, severity="warning",
                        confidence=0.75, evidence=self.ev.items,
                        facts={"input_share_pct": share, "steps_read": len(self.shares),
                               "worst_step_input_pct": round(100 * worst[0], 1)}, first_line=self.ev.first())]


PARSERS = (InputParser, StepTimingParser, MegatronTimerParser)
