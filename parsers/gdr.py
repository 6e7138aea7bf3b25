"""slow_comm.no_gdrdma: NCCL's EFA channels without GPUDirect RDMA on an instance that offers it.

NCCL names the transport of every channel it sets up ("Channel 00/0 : 9[1] -> 0[0] [receive] via NET/AWS
Libfabric/0/GDRDMA"); the "/GDRDMA" suffix says the NIC reads and writes GPU memory itself. On the P-series from p4d on,
EFA offers that, so channels that all lack it mean every transfer is staged through host memory. Older instances
(p3dn) and the g-series do not offer it: there the same lines are as good as it gets, and the instance is then
named in no platform line this reader trusts, so it says nothing. Channel lines are most of an NCCL log: they are
counted chunk-wide (the transport reader's feed_chunk), and not at all once one channel shows GPUDirect RDMA."""
from __future__ import annotations

from core.models import Evidence, Finding
from parsers.scan.base import Context

GDR_FAMILIES = ("p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300", "p6e-gb200")
_CHANNELS = (b" via NET/AWS Libfabric/", b" via NET/Libfabric/")


def wanted(sample: bytes) -> bool:
    """Whether a chunk holds NCCL channels over the libfabric plugin (one C-level look for the common part first)."""
    return b" via NET/" in sample and any(c in sample for c in _CHANNELS)


class GdrWatch:
    def __init__(self) -> None:
        self.gdr = False            # a channel (or any line) named GPUDirect RDMA
        self.channels = 0           # plugin channel lines counted before that
        self.first: tuple[int, str] | None = None   # (line, text) of the first of them

    def feed_chunk(self, buf: bytes, start_no: int) -> None:
        if self.gdr:
            return
        if b"/GDRDMA" in buf:
            self.gdr = True
            return
        for c in _CHANNELS:
            n = buf.count(c)
            if n and self.first is None:
                at = buf.find(c)
                ls = buf.rfind(b"\n", 0, at) + 1
                le = buf.find(b"\n", at)
                self.first = (start_no + buf.count(b"\n", 0, ls) + 1,
                              buf[ls:le if le >= 0 else len(buf)].decode("utf-8", "replace").strip()[:500])
            self.channels += n

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
