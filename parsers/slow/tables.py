"""Phase tables read by what their rows mean, whatever program printed them: a row is a name followed only by
numbers (times, percentages, counts), in whitespace- or pipe-aligned columns; a table is a run of such rows. The
name says what the phase is — fetching input (`enumerate(DataLoader)…`, `get_train_batch`, `Read data`,
`data_loading`) or communicating (NCCL kernels) — and the numbers say its share:

- torch.profiler rows, with or without their header: the percentages come in column order (Self CPU %, CPU total %,
  then Self CUDA % where CUDA was profiled), so a DataLoader row's CPU total % is the input share and the NCCL
  kernels' Self CUDA % add up to the communication share;
- a table with one percentage a row (Blocks' and similar section timers): the data row's own percentage;
- a table of times only (Lightning's SimpleProfiler without `extended`: action, mean, total): the data row's total
  over the sum of the rows' totals, where the data row is the largest phase.

Tables the dedicated readers own are left to them: a profiler table under its header (parsers.slow) and a Lightning
report with its percentages or its `run_training_epoch` total (timers.py)."""
from __future__ import annotations

import re

from core.models import Finding
from parsers.scan.base import Context, EvidenceBox, Hit, Parser
from parsers.slow.timers import CPROFILE_TOTAL, COMM_SHARE_BAD_PCT, INPUT_BAD_PCT

_SPLIT = re.compile(r"\s*\|\s*|\s*\t\s*|\s{2,}")
_CELL = re.compile(r"(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)\s*(%|us|ms|s|min)?")
_DATA = ("dataloader", "data_loader", "data loading", "data_loading", "load_data", "data_load", "read data",
         "get_train_batch", "train_dataloader_next", "fetch_batch", "next_data")
_LIGHTNING = ("train_dataloader_next", "get_train_batch")
_STEP_PHASE = re.compile(r"(?i)forward|backward|optimi[sz]er|train|step|batch")
_NAMED_BY_OTHERS = ("Self CPU %", "run_training_epoch")
MIN_ROWS = 3   # a table of times only: at least this many phases to share the step
_CPU_TOTAL = re.compile(r"Self CPU time total:\s*([\d.]+)\s*(us|ms|s)\b")
TO_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "min": 60000.0}
_COLLECTIVE_ROWS = ("gloo:", "c10d::", "nccl:")


def _row(text: str) -> tuple[str, list[tuple[float, str]]] | None:
    """(name, [(number, unit or '%' or '')]) for a table row, None for anything else."""
    t = text.strip().strip("|").strip()
    parts = [p for p in _SPLIT.split(t) if p]
    if len(parts) < 2 or not any(c.isalpha() for c in parts[0]):
        return None
    cells = []
    for p in parts[1:]:
        m = _CELL.fullmatch(p)
        if not m:
            return None
        cells.append((float(m.group(1)), m.group(2) or ""))
    return parts[0], cells


def _is_data(name: str) -> bool:
    low = name.lower()
    return any(k in low for k in _DATA)


def _is_nccl_kernel(name: str) -> bool:
    return name.startswith("nccl") and "Kernel" in name


class PhaseTableParser(Parser):
    name = "slow_tables"
    triggers = ("DataLoader", "dataloader", "get_train_batch", "Read data", "data_loading", "ncclKernel",
                "ncclDevKernel", "fetch_batch", "gloo:", "nccl:all", "nccl:reduce", "nccl:broadcast")
    before = 40
    after = 40

    def __init__(self) -> None:
        super().__init__()
        self.done_to = 0   # tables are read whole from their first hit: later hits inside one are skipped
        self.input: tuple[float, str, int, str] | None = None   # share, row name, line, text
        self.comm: tuple[float, str, int, str] | None = None    # share, largest kernel, line, text

    def feed(self, hit: Hit) -> None:
        if hit.no <= self.done_to:
            return
        before, after = hit.before, hit.after
        lines = [*before, hit.text, *after]
        first_no = hit.no - len(before)
        me = len(before)
        if _row(hit.text) is None:
            return
        lo = me
        while lo > 0 and _part_of_table(lines[lo - 1]):
            lo -= 1
        hi = me
        while hi + 1 < len(lines) and _part_of_table(lines[hi + 1]):
            hi += 1
        self.done_to = first_no + hi
        block = lines[lo:hi + 1]
        rows = [(first_no + lo + i, x, r) for i, x in enumerate(block) if (r := _row(x)) is not None]
        total = next((m for x in lines[hi + 1:hi + 4] if (m := _CPU_TOTAL.search(x))), None)
        total_ms = float(total.group(1)) * TO_MS[total.group(2)] if total else None
        if any(k in x for x in block for k in _NAMED_BY_OTHERS):
            # the dedicated readers own a profiler table under its header, except a CPU-only one's collectives
            if total_ms and not any("Self CUDA" in x for x in block):
                self._cpu_collectives(rows, total_ms)
            return
        self._judge(rows, total_ms)

    def _cpu_collectives(self, rows: list, total_ms: float) -> None:
        """A CPU-only profile (no CUDA columns: gloo, or the CPU side alone): the collectives' own rows (gloo:…,
        c10d::…, nccl:…) by their CPU total time against the profile's total."""
        comm = []
        for no, x, (name, cells) in rows:
            if name.startswith(_COLLECTIVE_ROWS) and len(cells) >= 4 and cells[3][1] in TO_MS:
                comm.append((cells[3][0] * TO_MS[cells[3][1]], name, no, x))
        if comm and total_ms > 0:
            top = max(comm)
            share = round(100 * min(top[0] / total_ms, 1.0), 2)
            if self.comm is None or share > self.comm[0]:
                self.comm = (share, top[1], top[2], top[3])

    def _judge(self, rows: list, total_ms: float | None = None) -> None:
        if any(name.endswith(_LIGHTNING) and len(cells) == 4 for _, _, (name, cells) in rows):
            return   # Lightning's extended report (action, mean, calls, total, percentage): timers.py reads it
        pcts = [(no, x, name, [v for v, u in cells if u == "%"], cells) for no, x, (name, cells) in rows]
        profiler = [p for p in pcts if len(p[3]) >= 2]
        if profiler:
            for no, x, name, pc, _ in profiler:
                if _is_data(name) and (self.input is None or pc[1] > self.input[0]):
                    self.input = (pc[1], name, no, x)
            if total_ms and all(len(p[3]) <= 2 for p in pcts):
                self._cpu_collectives(rows, total_ms)
            kernels = [(pc[2], name, no, x) for no, x, name, pc, _ in profiler if len(pc) >= 3 and _is_nccl_kernel(name)]
            if kernels:
                share = round(sum(k[0] for k in kernels), 2)
                top = max(kernels)
                if self.comm is None or share > self.comm[0]:
                    self.comm = (share, top[1], top[2], top[3])
            return
        single = [p for p in pcts if len(p[3]) == 1]
        if single:
            for no, x, name, pc, _ in single:
                if name.endswith(_LIGHTNING):
                    continue   # Lightning's report with its percentages: timers.py reads it
                if _is_data(name) and (self.input is None or pc[0] > self.input[0]):
                    self.input = (pc[0], name, no, x)
            return
        unit = any(c[-1][1] in TO_MS for *_, c in pcts if c)
        timed = [(cells[-1][0] * TO_MS.get(cells[-1][1], 1000.0 if unit else 1.0), no, x, name)
                 for no, x, name, _, cells in pcts if cells and cells[-1][0] >= 0]
        if not any(_STEP_PHASE.search(t[3]) for t in timed):
            return   # no forward/backward/optimizer/train row: a start-up timing summary, not a step's phases
        data = [t for t in timed if _is_data(t[3])]
        total = sum(t[0] for t in timed)
        if len(timed) >= MIN_ROWS and data and total > 0:
            top = max(data)
            # the largest phase, beside at least two others that take time (a table cut short shares nothing)
            others = sum(1 for t in timed if t is not top and t[0] >= 0.05 * top[0])
            if top[0] >= max(t[0] for t in timed) and others >= 2:
                share = round(100 * top[0] / total, 1)
                if self.input is None or share > self.input[0]:
                    self.input = (share, top[3], top[1], top[2])

    def finish(self, ctx: Context) -> list[Finding]:
        out = []
        if self.input and self.input[0] > INPUT_BAD_PCT:
            share, row, no, text = self.input
            self.ev.add(no, text)
            out.append(Finding(
                symptom="slow_input", rule="slow_input.phase_table", severity="warning", confidence=0.7,
                title=f"The step waits on input data: the profile puts {share:g}% of the time in fetching data ({row[:60]})",
                evidence=self.ev.items, facts={"input_share_pct": share, "input_row": row[:120]},
                first_line=self.ev.first()))
        if self.comm and self.comm[0] > COMM_SHARE_BAD_PCT:
            share, top, no, text = self.comm
            ev = EvidenceBox()
            ev.add(no, text)
            out.append(Finding(
                symptom="slow_comm", rule="slow_comm.profiler" if _is_nccl_kernel(top) else "slow_comm.cpu_profile",
                severity="warning", confidence=0.7,
                title=(f"{'NCCL kernels hold' if _is_nccl_kernel(top) else 'Collectives hold'} {share:.1f}% of the "
                       f"profiled {'CUDA' if _is_nccl_kernel(top) else 'CPU'} time: the step waits on communication "
                       f"(largest: {top[:60]})"),
                evidence=ev.items, facts={"comm_share_pct": share, "top_kernel": top[:120]}, first_line=ev.first()))
        return out


def _part_of_table(line: str) -> bool:
    """A row, a rule line (----, ===, |---|), or a header of words between rows."""
    s = line.strip()
    if not s:
        return False
    if set(s) <= set("-=|+: \t"):
        return True
    if _row(line) is not None:
        return True
    parts = [p for p in _SPLIT.split(s.strip("|")) if p]
    return len(parts) >= 3 and all(not _CELL.fullmatch(p) for p in parts)   # a header


_CPROFILE_ROW = re.compile(r"^\s*\d+(?:/\d+)?\s+[\d.]+\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s+(\S.*)$")
# the functions through which a training loop waits for its next batch
_FETCH_FUNCS = ("dataloader.py", "fetch.py", "(__getitem__)", "(__next__)", "(_next_data)")


class CProfileParser(Parser):
    """A whole run under cProfile (`python -m cProfile -s cumtime train.py`, torch's old bottleneck tool): the batch
    fetch's cumulative time (DataLoader.__next__, the fetcher, the Dataset's __getitem__) against the run's total.
    The per-action blocks of Lightning's advanced profiler ("Profile stats for: …") are its reader's (parsers.slow.timers)."""
    name = "slow_input_cprofile"
    triggers = ("function calls", "dataloader.py", "fetch.py", "(__getitem__)")
    before = 2

    def __init__(self) -> None:
        super().__init__()
        self.total: float | None = None
        self.in_run = False
        self.fetch: tuple[float, int, str] | None = None

    def feed(self, hit: Hit) -> None:
        t = hit.text
        m = CPROFILE_TOTAL.search(t)
        if m:
            self.in_run = not any("Profile stats for:" in b for b in hit.before)
            if self.in_run:
                self.total = max(self.total or 0.0, float(m.group(1)))
            return
        if not self.in_run:
            return
        r = _CPROFILE_ROW.match(t)
        if r and any(f in r.group(2) for f in _FETCH_FUNCS):
            cum = float(r.group(1))
            if self.fetch is None or cum > self.fetch[0]:
                self.fetch = (cum, hit.no, t)

    def finish(self, ctx: Context) -> list[Finding]:
        if not self.total or not self.fetch:
            return []
        share = round(100 * min(self.fetch[0] / self.total, 1.0), 1)
        if share <= INPUT_BAD_PCT:
            return []
        self.ev.add(self.fetch[1], self.fetch[2])
        return [Finding(symptom="slow_input", rule="slow_input.phase_table", severity="warning", confidence=0.65,
                        title=(f"The step waits on input data: fetching batches takes {share:g}% of the profiled run "
                               "(cProfile's cumulative time)"),
                        evidence=self.ev.items, facts={"input_share_pct": share, "input_row": self.fetch[2].split()[-1][:120]},
                        first_line=self.ev.first())]


PARSERS = (PhaseTableParser, CProfileParser)
