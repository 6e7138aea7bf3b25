"""nccl-tests result tables (all_reduce_perf, all_gather_perf, alltoall_perf, …): bus bandwidth per message size.

Not a symptom: the numbers go to the diagnosis' `benchmarks` for the weekly report, which compares them with
what the instance type should reach."""
from __future__ import annotations

from core import instances as I
from parsers.scan.base import Collector, Context, Hit, rx, search

_TYPES = ("float", "half", "bfloat16", "double", "int8", "uint8", "int32", "uint32", "int64", "uint64", "fp8_e4m3")
NCCL_TESTS_ROW = _ROW = rx(r"^\s*(\d+)\s+(\d+)\s+(" + "|".join(_TYPES) + r")\s+(\S+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+|N/A)")
TYPE_TRIGGERS = tuple(f" {t} " for t in _TYPES)   # the data-type column of a result row
_OP = rx(r"\b(all_reduce|all_gather|alltoall|reduce_scatter|broadcast|reduce|sendrecv|gather|scatter|hypercube)_perf\b")
_AVG = rx(r"Avg bus bandwidth\s*:\s*([\d.]+)")
_RANK = rx(r"^\s*#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$")


class NcclTestsCollector(Collector):
    name = "nccl_tests"
    triggers = (*TYPE_TRIGGERS, "Avg bus bandwidth", "_perf", "# Rank ", "#  Rank ")

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.op: str | None = None
        self.avg: float | None = None
        self.hosts: set[str] = set()
        self.gpu: str | None = None
        self.ranks = 0

    def feed(self, hit: Hit) -> None:
        t = hit.text   # (launcher labels already taken off: scan's unprefix)
        m = search(_ROW, t)
        if m and len(self.rows) < 200:
            self.rows.append({"size_bytes": int(m.group(1)), "type": m.group(3), "time_us": float(m.group(6)),
                              "algbw": float(m.group(7)), "busbw": float(m.group(8)), "line": hit.no})
            return
        m = search(_AVG, t)
        if m:
            self.avg = float(m.group(1))
            return
        m = search(_RANK, t)
        if m:
            self.ranks += 1
            self.hosts.add(m.group(2))
            self.gpu = self.gpu or m.group(3)
            return
        m = search(_OP, t)
        if m and not self.op:
            self.op = m.group(1)

    def collect(self, ctx: Context) -> None:
        if not self.rows:
            return
        best = max(self.rows, key=lambda r: r["size_bytes"])
        instance = ctx.job.get("instance_family")
        if not instance and self.gpu:
            instance = I.instance_for_gpu(self.gpu)
        ctx.benchmarks.append({
            "tool": "nccl-tests", "op": self.op or "unknown", "rows": self.rows, "avg_busbw": self.avg,
            "max_size_busbw": best["busbw"], "max_size_bytes": best["size_bytes"], "ranks": self.ranks or None,
            "nodes": len(self.hosts) or None, "gpu": self.gpu, "instance": instance})


COLLECTOR = NcclTestsCollector
