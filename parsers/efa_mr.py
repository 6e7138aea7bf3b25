"""efa_mr_registration: aws-ofi-nccl or libfabric's EFA provider could not register a memory region."""
from __future__ import annotations

from typing import Any

from core.models import Finding
from parsers.base import Context, EvidenceBox, Hit, Parser, host_of, rank_of, rx, search

_OFI = rx(r"(?:(\w+):\d+ )?(?:NCCL WARN )?NET/OFI Unable to register memory \(type = (\d+)\) for device (\d+)\."
          r"(?: RC: (-?\d+)(?:, Error: ([^\n]+))?)?")
_LIBFABRIC = rx(r"Unable to register MR(?: of (\d+) bytes)?: ([^,\n]+)")
_FI_MR = rx(r"fi_mr_reg(?:attr)? failed(?:[^\n]*?(?:rail|device) (\d+))?")
_DMABUF = rx(r"dmabuf support status: 1|hmem_cuda_use_dmabuf=1|FI_HMEM_CUDA_USE_DMABUF=1")
_MEM_TYPES = {1: "host", 2: "cuda"}


class EfaMrParser(Parser):
    name = "efa_mr_registration"
    triggers = ("Unable to register memory", "Unable to register MR", "fi_mr_reg", "dmabuf support status",
                "use_dmabuf")

    def __init__(self) -> None:
        self.ev = EvidenceBox()
        self.facts: dict[str, Any] = {}
        self.count = 0
        self.dmabuf = False
        self.hosts: set[str] = set()
        self.ranks: set[int] = set()

    def feed(self, hit: Hit) -> None:
        t = hit.text
        if search(_DMABUF, t):
            self.dmabuf = True
            return
        f = self.facts
        m = search(_OFI, t)
        if m:
            if m.group(1):
                f.setdefault("function", m.group(1))
            f.setdefault("mem_type", _MEM_TYPES.get(int(m.group(2)), m.group(2)))
            f.setdefault("device", int(m.group(3)))
            if m.group(4):
                f.setdefault("rc", int(m.group(4)))
            if m.group(5):
                f.setdefault("error", m.group(5).strip())
        else:
            m = search(_LIBFABRIC, t)
            fi = None if m else search(_FI_MR, t)
            if not m and not fi:
                return
            if m:
                f.setdefault("error", m.group(2).strip())
                if m.group(1):
                    f.setdefault("bytes", int(m.group(1)))
                f.setdefault("function", "efa_mr_reg")
            else:
                f.setdefault("function", "fi_mr_reg")
        self.count += 1
        self.ev.add(hit.no, t)
        h = host_of(t)
        if h:
            self.hosts.add(h)
        r = rank_of(t)
        if r is not None:
            self.ranks.add(r)

    def finish(self, ctx: Context) -> list[Finding]:
        if not self.count:
            return []
        f = dict(self.facts)
        f["count"] = self.count
        if self.dmabuf:
            f["dmabuf"] = True
        if self.hosts:
            f["hosts"] = sorted(self.hosts)
        err = f.get("error", "")
        if f.get("rc") == -22 or "Invalid argument" in err:
            f["cause"] = "cuda_sync_memops"
        elif f.get("rc") == 12 or "Cannot allocate memory" in err:
            f["cause"] = "enomem"
        elif "Bad address" in err and self.dmabuf:
            f["cause"] = "dmabuf"
        what = f"{f['mem_type'].upper() if f.get('mem_type') == 'cuda' else f.get('mem_type', 'a')} memory"
        title = f"EFA could not register {what} for RDMA"
        if "device" in f:
            title += f" on device {f['device']}"
        detail = ", ".join(x for x in (f"RC {f['rc']}" if "rc" in f else "", err) if x)
        if detail:
            title += f" ({detail})"
        if f.get("function"):
            title += f" in {f['function']}"
        return [Finding(symptom="efa_mr_registration", rule=f"efa_mr_registration.{f.get('cause', 'other')}",
                        title=title, severity="critical", confidence=0.95, evidence=self.ev.items, facts=f,
                        first_line=self.ev.first())]


PARSER = EfaMrParser
