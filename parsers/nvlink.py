"""nvlink_inactive: NVLink links reported down by `nvidia-smi nvlink -s`, `dcgmi nvlink --link-status` or dcgmi diag."""
from __future__ import annotations

from typing import Any

from core.models import Finding
from parsers.base import Context, EvidenceBox, Hit, Parser, rx, search

_SMI_GPU = rx(r"^GPU (\d+): (.+?)(?: \(UUID|$)")
_SMI_LINK = rx(r"^\s*Link (\d+): (<inactive>|0 GB/s|Inactive|Down)")
_DCGM_GPU = rx(r"^\s*(gpuId|physicalId) (\d+):")
_DCGM_STATES = rx(r"^\s*([UDX_](?:\s+[UDX_])*)\s*$")
_DIAG = rx(r"\|\s*(NVLink|PCIe)[^|]*\|\s*Fail\b|(\d+) (?:active )?NvLinks?.*expected (\d+)"
           r"|NVLink (?:link )?\d+ (?:is )?(?:down|inactive)", flags=0)


class NvlinkParser(Parser):
    name = "nvlink_inactive"
    triggers = ("GPU ", "Link ", "gpuId", "physicalId", "NVLink", "NvLink", "nvlink")
    after = 1

    def __init__(self) -> None:
        self.ev = EvidenceBox()
        self.gpu: str | None = None
        self.down: dict[str, list[int]] = {}
        self.total_links: dict[str, int] = {}
        self.diag_fail = False

    def feed(self, hit: Hit) -> None:
        t = hit.text
        m = search(_SMI_GPU, t)
        if m:
            self.gpu = f"GPU {m.group(1)}"
            return
        m = search(_SMI_LINK, t)
        if m and self.gpu:
            self.down.setdefault(self.gpu, []).append(int(m.group(1)))
            self.ev.add(hit.no, f"{self.gpu}: {t.strip()}")
            return
        m = search(_DCGM_GPU, t)
        if m and hit.after:
            s = search(_DCGM_STATES, hit.after[0])
            if s:
                states = s.group(1).split()
                name = f"{'GPU' if m.group(1) == 'gpuId' else 'NvSwitch'} {m.group(2)}"
                self.total_links[name] = len(states)
                downs = [i for i, st in enumerate(states) if st == "D"]
                if downs:
                    self.down[name] = downs
                    self.ev.add(hit.no + 1, f"{name}: {hit.after[0].strip()}")
            return
        if search(_DIAG, t):
            m2 = search(_DIAG, t)
            if m2.group(2) and m2.group(3) and int(m2.group(2)) >= int(m2.group(3)):
                return
            self.diag_fail = True
            self.ev.add(hit.no, t)

    def finish(self, ctx: Context) -> list[Finding]:
        if not self.down and not self.diag_fail:
            return []
        f: dict[str, Any] = {"links_down": {k: v for k, v in sorted(self.down.items())}}
        n = sum(len(v) for v in self.down.values())
        f["down_count"] = n
        if self.diag_fail:
            f["dcgm_diag_failed"] = True
        gpus = sorted(self.down)
        title = (f"{n} NVLink link(s) down on {', '.join(gpus[:4])}{' and more' if len(gpus) > 4 else ''}"
                 if n else "DCGM diagnostics report an NVLink failure")
        title += ": GPU-to-GPU traffic inside the node is degraded or broken"
        return [Finding(symptom="nvlink_inactive", rule="nvlink_inactive.links_down" if n else "nvlink_inactive.dcgm_diag",
                        title=title, severity="critical", confidence=0.9, evidence=self.ev.items, facts=f,
                        first_line=self.ev.first())]


PARSER = NvlinkParser
