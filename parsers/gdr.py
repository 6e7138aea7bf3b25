"""slow_comm.no_gdrdma: NCCL's EFA channels without GPUDirect RDMA on an instance that offers it.

NCCL names the transport of every channel it sets up ("Channel 00/0 : 9[1] -> 0[0] [receive] via NET/AWS
Libfabric/0/GDRDMA"); the "/GDRDMA" suffix says the NIC reads and writes GPU memory itself. On the P-series from p4d on,
EFA offers that, so channels that all lack it mean every transfer is staged through host memory. Older instances
(p3dn) and the g-series do not offer it: there the same lines are as good as it gets, and the instance is then
named in no platform line this reader trusts, so it says nothing. Channel lines are most of an NCCL log: they are
a line family (rows counted in batches), and not at all once one channel shows GPUDirect RDMA."""
from __future__ import annotations

from core.models import Evidence, Finding
from parsers.scan.base import Context
from parsers.scan.rows import Family

GDR_FAMILIES = ("p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300", "p6e-gb200")
# a row carries its line only while it lacks GPUDirect RDMA (the first such line is the evidence)
CHANNELS = Family("net_channel", (" via NET/AWS Libfabric/", " via NET/Libfabric/"), (("gdr", r"(/GDRDMA)"),),
                  need=("gdr",))


class GdrWatch:
    def __init__(self) -> None:
        self.gdr = False            # a channel (or any line) named GPUDirect RDMA
        self.channels = 0           # plugin channel lines counted before that
        self.first: tuple[int, str] | None = None   # (line, text) of the first of them

    def feed_rows(self, rows) -> None:
        if self.gdr:
            return
        if any(rows.get("gdr")):
            self.gdr = True
            return
        if self.first is None:
            self.first = (rows.no[0], rows.text[0].strip()[:500])
        self.channels += sum(rows.count)

    def finding(self, ctx: Context, efa: bool) -> Finding | None:
        """The finding, where EFA was picked, the instance offers GPUDirect RDMA and no channel used it."""
        family = str(ctx.job.get("instance_family", ""))
        if self.gdr or not self.channels or not efa or family not in GDR_FAMILIES or self.first is None:
            return None
        line, text = self.first
        return Finding(
            symptom="slow_comm", rule="slow_comm.no_gdrdma", severity="warning", confidence=0.8,
            title=f"NCCL's EFA channels run without GPUDirect RDMA on {family}: every transfer is staged through host "
                  f"memory ({self.channels} channel lines, none via GDRDMA)",
            evidence=[Evidence(line=line, text=text)], facts={"instance": family, "net_channel_lines": self.channels},
            first_line=line)
