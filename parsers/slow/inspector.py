"""slow_comm from NCCL Inspector output (the profiler plugin in NCCL's ext-profiler/inspector, NCCL_INSPECTOR_ENABLE=1):
one JSON object per collective and communicator, compact or pretty-printed —

    {"header": {"id": "0x7f8c…", "rank": 2, "n_ranks": 8, "nnodes": 1}, "metadata": {…, "hostname": "…"},
     "coll_perf": {"coll": "AllReduce", "coll_sn": 1407, "coll_msg_size_bytes": 17179869184, "coll_exec_time_us": 61974,
                   "coll_algobw_gbs": 277.2, "coll_busbw_gbs": 485.1}}

Judged as nccl-tests tables are: the ring collectives at their largest message (64 MiB or more), the median bus
bandwidth of the records of that size against what the instance's fabric carries (core.instances), which needs the
instance — from the log (an instance type, NCCL's platform line) or a GPU it names (nvidia-smi, nccl-tests)."""
from __future__ import annotations

from statistics import median
from typing import Any

from core import instances as I
from core.models import Finding
from parsers.scan.base import Context, Hit, Parser, findall, rx, search
from parsers.slow.util import GPU_NAME

_FIELD = rx(r'"(coll|coll_msg_size_bytes|coll_busbw_gbs|nnodes)"\s*:\s*("[^"]*"|-?[\d.]+)')
_OPS = {"AllReduce": "all_reduce", "ReduceScatter": "reduce_scatter", "AllGather": "all_gather"}


class InspectorParser(Parser):
    name = "slow_comm_inspector"
    triggers = ('"coll_busbw_gbs"', '"coll_msg_size_bytes"', '"coll":', '"nnodes"', "NVIDIA ")

    def __init__(self) -> None:
        super().__init__()
        self.cur: dict[str, Any] = {}
        self.nodes = 0
        self.records: dict[tuple[str, int], list[tuple[float, int, str]]] = {}   # (op, bytes) -> busbw, line
        self.gpu = ""

    def feed(self, hit: Hit) -> None:
        if not self.gpu and "NVIDIA " in hit.text and (g := search(GPU_NAME, hit.text)):
            self.gpu = g.group(1)
        for m in findall(_FIELD, hit.text):
            key, raw = m.group(1), m.group(2).strip('"')
            if key == "nnodes":
                self.nodes = max(self.nodes, int(float(raw)))
            elif key == "coll":
                self.cur = {"op": _OPS.get(raw)}
            elif key == "coll_msg_size_bytes":
                self.cur["bytes"] = int(float(raw))
            elif self.cur.get("op") and "bytes" in self.cur and len(self.records) < 64:
                rows = self.records.setdefault((self.cur["op"], self.cur["bytes"]), [])
                if len(rows) < 10_000:
                    rows.append((float(raw), hit.no, hit.text))
                self.cur = {}

    def finish(self, ctx: Context) -> list[Finding]:
        judged = [(op, size) for op, size in self.records if size >= I.MIN_JUDGED_BYTES]
        if not judged:
            return []
        op, size = max(judged, key=lambda k: (k[1], len(self.records[k])))
        rows = self.records[(op, size)]
        busbw = round(median(r[0] for r in rows), 1)
        instance = ctx.job.get("instance_family") or I.instance_for_gpu(self.gpu)
        nodes = self.nodes or 1
        exp = I.busbw_ceiling(op, instance, nodes, size)
        if not exp or busbw >= I.BUSBW_OK * exp:
            return []
        low = min(rows)
        self.ev.add(low[1], low[2])
        facts, where = busbw_facts(op, busbw, exp, size, nodes, instance)
        title = (f"{op} runs at {busbw:g} GB/s bus bandwidth (median of {len(rows)} NCCL Inspector record(s) at "
                 f"{size >> 20} MiB) on {where}, {facts['ratio_pct']:g}% of the ~{exp:g} GB/s its fabric should carry")
        return [Finding(symptom="slow_comm", rule="slow_comm.inspector", title=title, severity="warning",
                        confidence=0.75, evidence=self.ev.items, facts=facts, first_line=self.ev.first())]


def busbw_facts(op: str, busbw: float, exp: float, size: int, nodes: int,
                instance: str | None) -> tuple[dict, str]:
    """A slow collective's facts (nccl-tests or NCCL Inspector) and where it ran, in words."""
    facts = {"op": op, "busbw_gbps": busbw, "expected_gbps": exp, "ratio_pct": round(100 * busbw / exp, 1),
             "message_bytes": size, "nodes": nodes, "instance": instance}
    return facts, f"{nodes} x {instance}" if nodes > 1 else f"one {instance} node"


PARSERS = (InspectorParser,)
