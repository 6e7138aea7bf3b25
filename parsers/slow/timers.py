"""Per-phase timers that frameworks print: Megatron's and DeepSpeed's, read for two slow symptoms: slow_input (Megatron's batch-generator
against forward-backward) and slow_comm (gradient all-reduce / reduce-scatter and parameter all-gather against the
whole step). The thresholds of both symptoms live here; the family module (parsers/slow/__init__.py) imports them.

Megatron prints its timers either on one line, "time (ms) | forward-compute: F | backward-compute: B |
backward-params-all-reduce: A | … | optimizer: O | batch-generator: G" (older releases), or with --timing-log-level as
a "(min, max) time across ranks (ms):" block with one "name ....: (min, max)" line per timer (the max is read). The
gradient sync is `backward-params-all-reduce` + `backward-embedding-all-reduce` (or their sum,
`backward-reduce-model-grads`) in older Megatron, outside forward-backward; `all-grads-sync` and the layer-norm and
embedding all-reduces in Megatron Core, inside forward-backward; `params-all-gather` inside the optimizer step.
DeepSpeed's wall-clock breakdown prints "time (ms) | forward_microstep: F | backward_microstep: B |
backward_inner_microstep: I | backward_allreduce_microstep: A | step_microstep: S" (A is part of B), per step without
"_microstep", and in newer releases as fwd / bwd / bwd_inner / bwd_allreduce. Lightning's
SimpleProfiler report gives the data fetch's share of training (slow_input)."""
from __future__ import annotations

import re
from statistics import median

from core.models import Finding
from parsers.scan.base import Context, EvidenceBox, Hit, Parser, findall, rx

INPUT_BAD_PCT = 25.0        # a quarter of the step spent fetching data is a bottleneck worth the first look
COMM_SHARE_BAD_PCT = 40.0   # collectives holding this much of the step: the step waits on communication

_OLD_SYNC = ("backward-params-all-reduce", "backward-embedding-all-reduce", "backward-layernorm-all-reduce")
_CORE_SYNC = ("all-grads-sync", "layernorm-grads-all-reduce", "embedding-grads-all-reduce")
# DeepSpeed's engine timers, per micro-step and per step, under their older and newer names -> one name each
_DS = {**dict.fromkeys(("forward_microstep", "fwd_microstep", "forward", "fwd"), "ds_forward"),
       **dict.fromkeys(("backward_microstep", "bwd_microstep", "backward", "bwd"), "ds_backward"),
       **dict.fromkeys(("backward_allreduce_microstep", "bwd_allreduce_microstep", "backward_allreduce",
                        "bwd_allreduce"), "ds_allreduce"),
       **dict.fromkeys(("step_microstep", "step"), "ds_step")}
_P2P = ("forward-recv", "forward-send", "backward-recv", "backward-send")   # only with pipeline parallelism
_NAMES = ("forward-backward", "forward-compute", "backward-compute", "batch-generator", "optimizer",
          "backward-reduce-model-grads", "params-all-gather", *_OLD_SYNC, *_CORE_SYNC, *_DS, *_P2P)
_COMM = frozenset((*_OLD_SYNC, *_CORE_SYNC, "backward-reduce-model-grads", "params-all-gather", "ds_allreduce"))
_KIND = {**dict.fromkeys(_CORE_SYNC, "megatron_core"), **dict.fromkeys(_OLD_SYNC, "megatron_legacy"),
         "backward-reduce-model-grads": "megatron_legacy", "ds_allreduce": "deepspeed"}
_TIMER = rx(r"(?<![\w-])(" + "|".join(sorted(_NAMES, key=len, reverse=True)) + r")\s*\.*:\s*"
            r"(?:\(\s*([\d.]+),\s*([\d.]+)\)|([\d.]+))")
SPREAD_BAD = 0.20   # the slowest rank's compute this much over the fastest's, report after report: one slow rank


def _comm_share(b: dict[str, float]) -> float | None:
    """The share of one report's step spent in data-parallel collectives, or None when it does not say."""
    if "ds_allreduce" in b:   # DeepSpeed: the all-reduce is part of backward
        total = b.get("ds_forward", 0.0) + b.get("ds_backward", 0.0) + b.get("ds_step", 0.0)
        return b["ds_allreduce"] / total if total > 0 else None
    old = b.get("backward-reduce-model-grads", sum(b.get(n, 0.0) for n in _OLD_SYNC))
    core = sum(b.get(n, 0.0) for n in _CORE_SYNC) + b.get("params-all-gather", 0.0)
    if old + core <= 0:
        return None
    if "forward-backward" in b:        # Megatron Core: the sync inside forward-backward, the all-gather in optimizer
        total = b["forward-backward"] + b.get("optimizer", 0.0)
    else:                              # older Megatron: the all-reduce after forward and backward compute
        total = b.get("forward-compute", 0.0) + b.get("backward-compute", 0.0) + old + b.get("optimizer", 0.0)
    return min(1.0, (old + core) / total) if total > 0 else None


OPTIMIZER_BAD_PCT = 50.0   # the optimizer step holding over half of each step


def _optimizer_share(b: dict[str, float]) -> float | None:
    """The share of one report's step spent in the optimizer step (DeepSpeed's step against forward + backward +
    step; Megatron's optimizer against forward-backward + optimizer), or None when it does not say."""
    if "ds_step" in b and "ds_forward" in b and "ds_backward" in b:
        total = b.get("ds_forward", 0.0) + b.get("ds_backward", 0.0) + b["ds_step"]
        return b["ds_step"] / total if total > 0 else None
    if "optimizer" in b and "forward-backward" in b:
        total = b["forward-backward"] + b["optimizer"]
        return b["optimizer"] / total if total > 0 else None
    return None


class MegatronTimerParser(Parser):
    name = "megatron_timers"
    triggers = ("batch-generator", "forward-backward", "forward-compute", "backward-compute", "all-grads-sync",
                "backward-params-all-reduce", "backward-reduce-model-grads", "params-all-gather",
                "backward_allreduce", "bwd_allreduce",   # DeepSpeed's older and newer timer names
                *_P2P)

    def __init__(self) -> None:
        super().__init__()
        self.block: dict[str, float] = {}
        self.line: tuple[int, str] | None = None       # evidence: the block's largest collective, else its first line
        self.line_value = -1.0
        self.shares: list[tuple[float, int, str]] = []   # batch-generator / forward-backward, per report
        self.comm: list[tuple[float, int, str]] = []     # collectives / step, per report
        self.bg_line: tuple[int, str] | None = None
        self.kind = ""   # which timers: megatron_core, megatron_legacy or deepspeed (their overlap settings differ)
        self.minmax: dict[str, tuple[float, float]] = {}   # the block's (min, max) across ranks, where printed
        self.spreads: list[tuple[float, int, str]] = []    # compute (max / min - 1), per report without pipelining
        self.compute_line: tuple[int, str] = (0, "")
        self.opt: list[tuple[float, int, str]] = []      # optimizer step / whole step, per report
        self.first: tuple[int, str] | None = None         # the report's first line

    def _close(self) -> None:
        b = self.block
        step = b.get("forward-backward") or (b.get("forward-compute", 0.0) + b.get("backward-compute", 0.0))
        if "batch-generator" in b and step > 0 and self.bg_line:
            self.shares.append((min(1.0, b["batch-generator"] / step), *self.bg_line))
        share = _comm_share(b)
        if share is not None and self.line:
            self.comm.append((share, *self.line))
        opt = _optimizer_share(b)
        if opt is not None and self.first:
            self.opt.append((opt, *self.first))
        mm = self.minmax
        if "forward-compute" in mm and "backward-compute" in mm and not any(n in b for n in _P2P):
            low, high = (mm["forward-compute"][i] + mm["backward-compute"][i] for i in (0, 1))
            if low > 0:
                self.spreads.append((high / low - 1, *self.compute_line))
        self.block, self.bg_line, self.line, self.line_value, self.minmax = {}, None, None, -1.0, {}
        self.first = None

    def feed(self, hit: Hit) -> None:
        for m in findall(_TIMER, hit.text):
            name = _DS.get(m.group(1), m.group(1))
            if name in self.block:
                self._close()
            self.first = self.first or (hit.no, hit.text)
            self.block[name] = float(m.group(3) or m.group(4))
            if m.group(2) and name in ("forward-compute", "backward-compute"):
                self.minmax[name] = (float(m.group(2)), float(m.group(3)))
                self.compute_line = (hit.no, hit.text)
            if name in _KIND:
                self.kind = _KIND[name]
            if self.line is None or (name in _COMM and self.block[name] >= self.line_value):
                self.line, self.line_value = (hit.no, hit.text), self.block[name] if name in _COMM else -1.0
            if name == "batch-generator":
                self.bg_line = (hit.no, hit.text)

    def finish(self, ctx: Context) -> list[Finding]:
        self._close()
        return [*self._input(), *self._slow_comm(), *self._straggler(ctx), *self._optimizer_bound()]

    def _optimizer_bound(self) -> list[Finding]:
        """The optimizer step taking most of every step (CPU Adam under optimizer offload, or an optimizer that waits
        on host memory): the GPUs sit idle meanwhile."""
        reports = self.opt[1:] if len(self.opt) >= 3 else self.opt
        if not reports:
            return []
        share = round(100 * median(r[0] for r in reports), 1)
        if share <= OPTIMIZER_BAD_PCT:
            return []
        ev = EvidenceBox()
        ev.add(*max(reports)[1:])
        title = (f"The optimizer step takes {share:g}% of each step in the training timers over {len(reports)} "
                 "report(s): the GPUs wait for it (an optimizer offloaded to the CPU does this)")
        return [Finding(symptom="low_gpu_util", rule="low_gpu_util.optimizer_bound", title=title, severity="warning",
                        confidence=0.65, evidence=ev.items, facts={"optimizer_share_pct": share,
                                                                   "readings": len(reports)}, first_line=ev.first())]

    def _straggler(self, ctx: Context) -> list[Finding]:
        """Megatron's (min, max) compute timers: one rank (or tensor-parallel group) computing far longer than the
        fastest, report after report. Not judged with pipeline stages (they differ by design) nor with MoE experts
        (routing moves work between ranks); the timers do not say which rank."""
        reports = self.spreads[1:] if len(self.spreads) >= 3 else self.spreads
        slow = [r for r in reports if r[0] >= SPREAD_BAD]
        if not slow or 2 * len(slow) < len(reports) or (ctx.job.get("pipeline_model_parallel_size") or 1) > 1 \
                or (ctx.job.get("num_experts") or 0) > 1:
            return []
        worst = max(slow)
        ev = EvidenceBox()
        ev.add(worst[1], worst[2])
        pct = round(100 * median(r[0] for r in slow), 1)
        title = (f"A straggler: the slowest rank's forward and backward compute take {pct:g}% longer than the fastest "
                 f"rank's in {len(slow)} of {len(reports)} timer reports (the timers do not name the rank)")
        return [Finding(symptom="straggler", rule="straggler.megatron_timers", title=title, severity="warning",
                        confidence=0.6, evidence=ev.items, first_line=ev.first(),
                        facts={"detector": "megatron_timers", "slowdown_pct": pct,
                               "reports": len(reports), "slow_reports": len(slow)})]

    def _input(self) -> list[Finding]:
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

    def _slow_comm(self) -> list[Finding]:
        reports = self.comm[1:] if len(self.comm) >= 3 else self.comm   # the first report carries the warm-up
        if not reports:
            return []
        share = round(100 * sum(s for s, _, _ in reports) / len(reports), 1)
        if share <= COMM_SHARE_BAD_PCT:
            return []
        ev = EvidenceBox()
        ev.add(*max(reports)[1:])
        title = (f"Gradient collectives take {share:g}% of the step in the training timers over {len(reports)} "
                 "report(s): the step waits on communication")
        return [Finding(symptom="slow_comm", rule="slow_comm.timers", title=title, severity="warning", confidence=0.7,
                        evidence=ev.items, facts={"comm_share_pct": share, "reports": len(reports), "timers": self.kind},
                        first_line=ev.first())]




class LightningProfilerParser(Parser):
    """Lightning's SimpleProfiler report: "|  [_TrainingEpochLoop].train_dataloader_next\t|  0.21\t|  200\t|  42.0\t|
    74.8\t|" rows (action, mean s, calls, total s, % of the profiled time; without `extended`, action, mean, total).
    The input share is the data fetch's total over the training epochs' total (`run_training_epoch`), else the
    row's own percentage of the profiled time. Older releases name the fetch `get_train_batch`."""
    name = "slow_input_lightning"
    triggers = ("train_dataloader_next", "get_train_batch", "run_training_epoch", "Profile stats for:")
    after = 2   # the advanced profiler: "Profile stats for: ACTION" then "N function calls … in T seconds"

    def __init__(self) -> None:
        super().__init__()
        self.fetch: tuple[float, float | None, str, int, str] | None = None   # total s, % column, action, line
        self.epoch_total: float | None = None
        self.advanced: dict[str, tuple[float, int, str]] = {}   # the advanced profiler: action -> seconds, line

    def _fetch_from_advanced(self) -> None:
        """The advanced profiler's per-action totals: the batch fetch's share of all the actions' time (actions that
        contain the others left out), as the simple report's percentage would give it."""
        fetch = [(a, v) for a, v in self.advanced.items() if a.endswith(("train_dataloader_next", "get_train_batch"))]
        if not fetch:
            return
        action, (secs, no, text) = max(fetch, key=lambda x: x[1][0])
        total = sum(v[0] for a, v in self.advanced.items() if not a.endswith(_CONTAINERS))
        if total > 0 and len(self.advanced) >= 2:
            self.fetch = (secs, 100 * secs / total, action, no, text)

    def _advanced(self, hit: Hit) -> None:
        action = hit.text.split("Profile stats for:", 1)[1].strip()
        for nxt in hit.after:
            m = CPROFILE_TOTAL.search(nxt)
            if m:
                if action and len(self.advanced) < 512:
                    self.advanced.setdefault(action, (float(m.group(1)), hit.no, hit.text))
                return

    def feed(self, hit: Hit) -> None:
        if "Profile stats for:" in hit.text:
            self._advanced(hit)
            return
        cells = [c.strip() for c in hit.text.strip().strip("|").split("|")]
        if len(cells) not in (3, 5) or not _number(cells[-1 if len(cells) == 3 else 3]):
            return
        action, total = cells[0], float(cells[-1 if len(cells) == 3 else 3])
        if action == "run_training_epoch":
            self.epoch_total = total
        elif action.endswith(("train_dataloader_next", "get_train_batch")) and self.fetch is None:
            pct = float(cells[4]) if len(cells) == 5 and _number(cells[4]) else None
            self.fetch = (total, pct, action, hit.no, hit.text)

    def finish(self, ctx: Context) -> list[Finding]:
        if self.fetch is None and self.advanced:
            self._fetch_from_advanced()
        if self.fetch is None:
            return []
        total, pct, action, no, text = self.fetch
        share = 100 * total / self.epoch_total if self.epoch_total else pct
        if share is None or share <= INPUT_BAD_PCT:
            return []
        self.ev.add(no, text)
        share = round(min(share, 100.0), 1)
        facts = {"input_share_pct": share, "input_row": action}
        title = (f"The step waits on input data: Lightning's profiler puts {share:g}% of the training time in "
                 f"fetching batches ({action})")
        return [Finding(symptom="slow_input", rule="slow_input.lightning_profiler", title=title, severity="warning",
                        confidence=0.8, evidence=self.ev.items, facts=facts, first_line=self.ev.first())]


CPROFILE_TOTAL = re.compile(r"function calls(?: \(\d+ primitive calls\))? in ([\d.]+) seconds")
_CONTAINERS = ("run_training_epoch", "run_training_batch", ".run")   # actions that hold the others


def _number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True


PARSERS = (MegatronTimerParser, LightningProfilerParser)
