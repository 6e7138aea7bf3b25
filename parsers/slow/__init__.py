"""The slow family: jobs that run, but slowly. slow_input (the step waits on its input: a torch.profiler table's
DataLoader row, per-step data time, Megatron's batch-generator timer), low_gpu_util (MFU, TFLOP/s, nvidia-smi
samples) and slow_comm (nccl-tests bus bandwidth, NCCL kernels in a profile); straggler and pipeline_bubble have
modules of their own in this package (straggler.py, pipeline.py). Stalls every few steps count, so input shares are total
data time over total step time across the lines read."""
from __future__ import annotations

import re

from core import instances as I
from core.models import Finding
from parsers.scan.base import Context, Hit, Parser, findall, rx, search
from parsers.collectors.nccl_tests import NCCL_TESTS_ROW, TYPE_TRIGGERS
from parsers.slow.inspector import InspectorParser, busbw_facts
from parsers.slow.pipeline import BubbleParser
from parsers.slow.straggler import StragglerParser
from parsers.slow.peers import PeerParser
from parsers.slow.tables import TO_MS, CProfileParser, PhaseTableParser
from parsers.slow.timers import COMM_SHARE_BAD_PCT, INPUT_BAD_PCT, LightningProfilerParser, MegatronTimerParser
from parsers.slow.util import UtilParser, UtilSamplesParser


_HEADER = rx(r"^\s*Name\s+Self CPU %\s+Self CPU\s+CPU total %\s+CPU total\b")
_DATALOADER_ROW = rx(r"^\s*(enumerate\(DataLoader\)\S*)\s+([\d.]+)%\s+\S+\s+([\d.]+)%\s+([\d.]+)(us|ms|s)\b")
_TOTAL = rx(r"^Self CPU time total:\s*([\d.]+)(us|ms|s)\b")
# Lightning's PyTorchProfiler: the whole step (ProfilerStep*) and the training batch inside it, by CPU total %; what
# the step spends outside its batch is fetching the next one (and hooks)
_STEP_ROWS = rx(r"^\s*(ProfilerStep\*?|(?:\[pl\]\[profile\])?run_training_batch)\s+[\d.]+%\s+\S+\s+([\d.]+)%",
                needs=("ProfilerStep", "run_training_batch"))
OUTSIDE_BATCH_BAD_PCT = 50.0   # inferred, not measured: only a step mostly outside its batch counts


class InputParser(Parser):
    name = "slow_input"
    triggers = ("Self CPU %", "enumerate(DataLoader)", "Self CPU time total", "ProfilerStep", "run_training_batch")

    def __init__(self) -> None:
        super().__init__()
        self.in_table = False
        self.share: float | None = None
        self.row = ""
        self.total_ms: float | None = None
        self.steps: dict[str, tuple[float, int, str]] = {}

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
                    self.ev.hit(hit, t)
            return
        m = search(_STEP_ROWS, t)
        if m:
            self.steps.setdefault("step" if m.group(1).startswith("Profiler") else "batch", (float(m.group(2)),
                                                                                              hit.no, t))
            return
        m = search(_TOTAL, t)
        if m:
            self.total_ms = round(float(m.group(1)) * TO_MS[m.group(2)], 3)

    def _outside_batch(self) -> list[Finding]:
        """The profiled step mostly outside its training batch: the loop waits on the next batch."""
        if set(self.steps) != {"step", "batch"} or self.steps["step"][0] <= 0:
            return []
        (step, no, t), (batch, bno, bt) = self.steps["step"], self.steps["batch"]
        share = round(100 * (1 - batch / step), 1)
        if share <= OUTSIDE_BATCH_BAD_PCT:
            return []
        self.ev.add(no, t)
        self.ev.add(bno, bt)
        title = (f"The step waits outside its training batch: the batch holds {batch:g}% of the profiled CPU time and "
                 f"the whole step {step:g}%, so {share:g}% of each step goes to fetching the next batch")
        return [Finding(symptom="slow_input", rule="slow_input.profiler_step_gap", title=title, severity="warning",
                        confidence=0.6, evidence=self.ev.items, facts={"input_share_pct": share,
                                                                       "input_row": "ProfilerStep* - run_training_batch"},
                        first_line=self.ev.first())]

    def finish(self, ctx: Context) -> list[Finding]:
        if self.share is None or self.share <= INPUT_BAD_PCT:
            return self._outside_batch()
        facts = {"input_share_pct": self.share, "input_row": self.row}
        if self.total_ms is not None:
            facts["profile_total_ms"] = self.total_ms
        title = (f"The step waits on input data: the DataLoader holds {self.share:g}% of the profiled CPU time "
                 "while the GPU idles")
        return [Finding(symptom="slow_input", rule="slow_input.profiler_dataloader", title=title,
                        severity="warning", confidence=0.8, evidence=self.ev.items, facts=facts,
                        first_line=self.ev.first())]


# The data key and the step key, in the spellings trainers use (mmengine/mmcv data_time + time, Paddle reader_cost /
# data_cost + batch_cost, torchvision-style data + time, DALI/timm load_data_time, ...), key: value or key=value; a
# step key whose time already includes the data time is "inclusive" below
# (Paddle's hapi prints them as averages, avg_reader_cost / avg_batch_cost; a value may carry its unit, and with a
# unit a space separates it from its key: "data 139.1 ms")
_VALUE = r"(?:\s*[:=]\s*(\d+(?:\.\d+)?)\s*(ms|s|sec)?\b|\s+(\d+(?:\.\d+)?)\s*(ms|s|sec)\b)"
_TIMING = rx(r"(?i)\b(?:avg_)?(data_wait_time|load_data_time|data_load_time|data_loading_time|dataloader_time|data_time"
             r"|data_cost|reader_cost|data_s|data)" + _VALUE)
_SYNC_READER = ("reader_cost", "data_cost")   # Paddle's: the time the step waited for its batch
_STEP = rx(r"(?i)(?<![\w.])(?:avg_)?(train_step_time|step_time|compute_time|updt_s|batch_time|batch_cost|iter_time|time)"
           + _VALUE)


_PART = re.compile(r"(?i)\b([a-z][\w+/-]*)\s*[:=]?\s+(\d+(?:\.\d+)?)\s*(ms|s)\b")


def _breakdown(t: str, step_at: int, dv: float, sv: float) -> bool:
    """Whether the step time is broken down on the line into parts that, with the data time, add up to it ("step_time
    151.5 ms (data 139.1 ms, fwd 2.6 ms, bwd+allreduce 9.8 ms)"): then the step includes the data time."""
    parts = [float(m.group(2)) / (1000.0 if m.group(3).lower() == "ms" else 1.0)
             for m in _PART.finditer(t[:1024], step_at) if not m.group(1).lower().startswith(("data", "step", "time"))]
    return bool(parts) and sv > 0 and abs(dv + sum(parts) - sv) <= 0.15 * sv


def _seconds(m) -> float:
    value, unit = (m.group(2), m.group(3)) if m.group(2) is not None else (m.group(4), m.group(5))
    return float(value) / (1000.0 if unit and unit.lower() == "ms" else 1.0)


_INCLUSIVE = ("time", "batch_time", "iter_time", "batch_cost")
# AverageMeter-style pairs (torchvision's and timm's ImageNet scripts, deepspeech.pytorch): "Time 1.599 (2.648)  Data
# 1.296 (2.388)" — this batch's value, then the running average since the epoch began, which is what counts
_AVG_DATA = rx(r"\bData:?\s+(\d+(?:\.\d+)?)s?\s+\(\s*(\d+(?:\.\d+)?)s?\s*\)", needs=("Data",))
_AVG_TIME = rx(r"\bTime:?\s+(\d+(?:\.\d+)?)s?(?:,\s*[\d.]+/s)?\s+\(\s*(\d+(?:\.\d+)?)s?", needs=("Time",))
AVG_MIN_ITERS = 10   # a running average over fewer steps is still mostly the first one (workers starting) ...
AVG_FEW_ITERS, AVG_FEW_PCT = 3, 50.0   # ... unless it covers a few steps and holds half of them
# A short paste (people paste the two or three lines around the event) is judged on its own, with a higher bar the
# fewer steps it shows: (steps read, input share that counts)
SHORT_PASTE_PCT = {1: 75.0, 2: 50.0}
SHORT_PASTE_LINES = 200   # ... when the input is that: its steps within its first lines
# a training step's line names its step or carries the step's other fields
_TRAINING_FIELD = rx(r"(?i)\b(?:loss|lr|eta|mem|samples|ips|it/s|tokens)\b")
_EVAL_MARKS = ("(val)", "Epoch(val)", "Epoch(test)", "valid", "eval ", "eval_", "Eval", "test ")
_ITER_KEY = rx(r"(?i)\biter(?:ation)?\s*[:=]\s*(\d{1,9})")   # Paddle's "iter: 20" (before its "epoch: [1/500]")
_ITER = rx(r"(?i)\biter\w*\W{0,3}(\d{1,9})\s*/\s*\d+|\[\s*(\d{1,9})\s*/\s*\d+(?:\s*\(\s*\d+%\))?\]")   # timm: "[ 3/4 (100%)]"
MIN_STEPS = 3


class StepTimingParser(Parser):
    name = "slow_input_steps"
    triggers = ("data_time", "load_data_time", "data_load_time", "data_loading_time", "dataloader_time", "data_cost",
                "reader_cost", "data_wait_time", "data: ", "data_s:", "Data ", "Data: ", "(data ", " data ",
                "Saving checkpoint", "saving checkpoint", "Checkpoint saved", "checkpoint saved")

    def __init__(self) -> None:
        super().__init__()
        self.readings: list[tuple[float, float]] = []
        self.saved_at = -10            # the line of the last checkpoint save: the next step also waits for it
        self.pauses: set[int] = set()  # readings taken right after a checkpoint save
        self.iters: list[int | None] = []
        self.first_line: tuple[int, str] = (0, "")
        self.worst: tuple[float, int, str] | None = None
        self.lines: list[tuple[int, str]] = []   # the first two readings' lines (a short paste's evidence)
        self.steplike: list[bool] = []           # ... and whether each is a training step's line
        self.running: tuple[float, float, int, int, str] | None = None   # AverageMeter averages: data, step, steps

    def feed(self, hit: Hit) -> None:
        t = hit.text
        if "heckpoint" in t and ("aving checkpoint" in t or "heckpoint saved" in t):
            self.saved_at = hit.no
            return
        if "(" in t and (ad := search(_AVG_DATA, t)) and (at := search(_AVG_TIME, t)):
            it = search(_ITER, t)
            n = int(next(g for g in it.groups() if g is not None)) if it else None
            data, total = float(ad.group(2)), float(at.group(2))
            if n is not None and n >= AVG_FEW_ITERS and 0 < data <= total:
                self.running = (data, total, n, hit.no, t)   # the latest average covers every step before it
            return
        if any(m in t for m in _EVAL_MARKS):
            return   # validation and test steps have timings of their own
        d = search(_TIMING, t)
        st = search(_STEP, t) if d else None
        if not st or st.start() == d.start():
            return
        dv, sv = _seconds(d), _seconds(st)
        # a step time below the reader's wait cannot include it (Paddle's hapi batch_cost is the compute alone); a
        # loader's own time (data_load_time, in workers) may exceed the step it overlaps, and is no wait then
        inclusive = st.group(1).lower() in _INCLUSIVE and (sv >= dv or d.group(1).lower() not in _SYNC_READER)
        inclusive = inclusive or _breakdown(t, st.start(), dv, sv)
        total = sv if inclusive else sv + dv
        if total <= 0 or dv > total:
            return
        if not self.readings:
            self.first_line = (hit.no, t)
        if len(self.lines) < 2:
            self.lines.append((hit.no, t))
            self.steplike.append(search(_ITER_KEY, t) is not None or search(_ITER, t) is not None
                                 or search(_TRAINING_FIELD, t) is not None)
        if hit.no - self.saved_at <= 3:
            self.pauses.add(len(self.readings))
        self.readings.append((dv, total))
        it = search(_ITER_KEY, t) or search(_ITER, t)
        self.iters.append(int(next(g for g in it.groups() if g is not None)) if it else None)
        if len(self.readings) > 1 and (self.worst is None or dv / total > self.worst[0]):
            self.worst = (dv / total, hit.no, t)

    def _running(self) -> list[Finding]:
        data, total, n, no, text = self.running
        share = round(100 * data / total, 1)
        if share <= (INPUT_BAD_PCT if n >= AVG_MIN_ITERS else AVG_FEW_PCT):
            return []
        self.ev.add(no, text)
        title = (f"The step waits on input data: data loading takes {share:g}% of the step time on average over "
                 f"{n} steps (the trainer's running averages)")
        return [Finding(symptom="slow_input", rule="slow_input.step_timing", title=title, severity="warning",
                        confidence=0.75, evidence=self.ev.items,
                        facts={"input_share_pct": share, "steps_read": n}, first_line=self.ev.first())]

    def _short(self) -> list[Finding]:
        """One or two steps pasted: no warm-up is left out (there is nothing to compare it with), so only a share
        that no first step explains counts — and not at all when the one step shown is a run's or an epoch's first."""
        if not any(self.steplike) or self.lines[-1][0] > SHORT_PASTE_LINES:
            return []   # a one-off timing line (set-up, preprocessing) or a long log: not a paste of training steps
        first = 1 if self.iters[0] in (0, 1) else 0   # a run's or an epoch's first step waits for the workers
        readings, lines = self.readings[first:], self.lines[first:]
        n = len(readings)
        if not n:
            return []
        data, total = (sum(r[i] for r in readings) for i in (0, 1))
        share = round(100 * data / total, 1) if total else 0.0
        if share < SHORT_PASTE_PCT[n]:
            return []
        worst = max(range(n), key=lambda i: readings[i][0] / readings[i][1])
        no, text = lines[worst]
        self.ev.add(no, text)
        facts = {"input_share_pct": share, "steps_read": n,
                 "worst_step_input_pct": round(100 * readings[worst][0] / readings[worst][1], 1)}
        title = (f"The step waits on input data: data loading takes {share:g}% of the step time in the {n} logged "
                 f"step{'s' if n > 1 else ''} shown")
        return [Finding(symptom="slow_input", rule="slow_input.step_timing", title=title, severity="warning",
                        confidence=0.6, evidence=self.ev.items, facts=facts, first_line=self.ev.first())]

    def _warm_up(self) -> int:
        """How many leading readings to leave out: the first logged step also waits for the workers to start and
        the first batch to be read, unless the excerpt starts mid-run (its iteration past the first log interval)."""
        first, second = self.iters[0], self.iters[1]
        if first is not None and second is not None and second > first and first > second - first:
            return 0
        return 1

    def finish(self, ctx: Context) -> list[Finding]:
        if self.running and not self.readings:
            return self._running()
        if len(self.readings) in SHORT_PASTE_PCT:
            return self._short()
        if len(self.readings) < MIN_STEPS or self.worst is None:
            return []
        skip = self._warm_up()
        if skip == 0 and self.readings[0][0] / self.readings[0][1] > self.worst[0]:
            self.worst = (self.readings[0][0] / self.readings[0][1], *self.first_line)
        # a step logged right after a checkpoint save waited for the save (its loader's workers stood idle meanwhile):
        # left out as the warm-up is; any other stall, one or many, counts
        kept = [r for i, r in enumerate(self.readings) if i >= skip and i not in self.pauses]
        self.steps = len(kept)
        data, total = (sum(r[i] for r in kept) for i in (0, 1))
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


# slow_comm: the collectives run far below what the fabric carries — nccl-tests bus bandwidth at large messages
# against the instance's expected figure, or NCCL kernels holding a large share of a profile's CUDA time.
_DASHES = rx(r"-{3,}")


class BusbwParser(Parser):
    """nccl-tests result rows, judged on the benchmark the collector built from them (ctx.benchmarks)."""
    name = "slow_comm"
    triggers = TYPE_TRIGGERS

    def __init__(self) -> None:
        super().__init__()
        self.row_text: dict[int, str] = {}
        self.reducing = False   # a reduction op in the rows: all_reduce or reduce_scatter when the tool is not named

    def feed(self, hit: Hit) -> None:
        m = search(NCCL_TESTS_ROW, hit.text)
        if m:
            self.row_text[hit.no] = hit.text
            self.reducing = self.reducing or m.group(4) != "none"

    def finish(self, ctx: Context) -> list[Finding]:
        for b in ctx.benchmarks:
            op = b.get("op") if b.get("op") != "unknown" else "all_reduce" if self.reducing else None
            exp = I.busbw_ceiling(op, b.get("instance"), b.get("nodes"), b["max_size_bytes"])
            floor = None if exp else I.fabric_floor(op, b.get("gpu"), b.get("nodes"), b["max_size_bytes"])
            exp = exp or floor
            if not exp or b["max_size_busbw"] >= I.BUSBW_OK * exp:
                continue
            row = max(b["rows"], key=lambda r: r["size_bytes"])
            self.ev.add(row["line"], self.row_text.get(row["line"], f"{row['size_bytes']} bytes: busbw {row['busbw']}"))
            facts, where = busbw_facts(b["op"] if b["op"] != "unknown" else "all_reduce or reduce_scatter",
                                       b["max_size_busbw"], exp, b["max_size_bytes"], b.get("nodes") or 1,
                                       b["instance"])
            if floor:
                where = f"{facts['nodes']} nodes of {b['gpu']}"
                facts.update(gpu=b["gpu"], fabric="unknown",
                             expected_because="the least RDMA fabric (100 Gb/s per node) such nodes are built with")
            title = (f"{facts['op']} reaches {b['max_size_busbw']:g} GB/s bus bandwidth at {b['max_size_bytes'] >> 20} "
                     f"MiB on {where}, {facts['ratio_pct']:g}% of the ~{exp:g} GB/s " +
                     ("even a 100 Gb/s RDMA fabric carries" if floor else "its fabric should carry"))
            return [Finding(symptom="slow_comm", rule="slow_comm.nccl_tests", title=title, severity="warning",
                            confidence=0.8, evidence=self.ev.items, facts=facts, first_line=self.ev.first())]
        return []


class CommProfileParser(Parser):
    """A torch.profiler table: the share of CUDA time in NCCL kernels (column spans from the table's dash line)."""
    name = "slow_comm_profile"
    triggers = ("Self CUDA %",)
    before = 1
    after = 60

    def __init__(self) -> None:
        super().__init__()
        self.share = 0.0
        self.top: tuple[float, str] = (0.0, "")
        self.header: tuple[int, str] | None = None

    def feed(self, hit: Hit) -> None:
        t = hit.text
        spans = [m.span() for m in findall(_DASHES, hit.before[-1])] if hit.before else []
        cols = [t[a:b].strip() for a, b in spans]
        if "Self CUDA %" not in cols:
            return
        k, self.header, seps = cols.index("Self CUDA %"), (hit.no, t), 0
        for row in hit.after:
            if row.startswith("---"):
                seps += 1
                if seps == 2:
                    break
                continue
            name, pct = row[spans[0][0]:spans[0][1]].strip(), row[spans[k][0]:spans[k][1]].strip().rstrip("%")
            if name.startswith("nccl") and "Kernel" in name and pct.replace(".", "", 1).isdigit():
                self.share += float(pct)
                self.top = max(self.top, (float(pct), name))

    def finish(self, ctx: Context) -> list[Finding]:
        if not self.header or self.share <= COMM_SHARE_BAD_PCT:
            return []
        self.ev.add(*self.header)
        title = (f"NCCL kernels hold {self.share:.1f}% of the profiled CUDA time: the step waits on communication "
                 f"(largest: {self.top[1][:60]})")
        return [Finding(symptom="slow_comm", rule="slow_comm.profiler", title=title, severity="warning",
                        confidence=0.75, evidence=self.ev.items,
                        facts={"comm_share_pct": round(self.share, 2), "top_kernel": self.top[1][:120]},
                        first_line=self.ev.first())]


PARSERS = (InputParser, StepTimingParser, MegatronTimerParser, LightningProfilerParser, UtilParser, UtilSamplesParser,
           BusbwParser, CommProfileParser, InspectorParser, StragglerParser, BubbleParser, PhaseTableParser,
           PeerParser, CProfileParser)
