"""The gpu family: the health of the GPUs and the links between them.

gpu_xid: NVIDIA driver Xid events, uncorrectable ECC errors, and row-remapping state from `nvidia-smi -q`.

nvlink_inactive: NVLink links reported down by `nvidia-smi nvlink -s`, `dcgmi nvlink --link-status` or dcgmi diag."""
from __future__ import annotations

from typing import Any

from core import instances as I
from core.models import Finding
from parsers.scan.base import Context, Hit, Parser, rx, search

# xid -> (meaning, action). Actions: app (fix/restart the job), reset (reset the GPU / reboot), drain (take the
# node out of the pool and open a hardware ticket).
XID_TABLE: dict[int, tuple[str, str]] = {
    8: ("GPU stopped responding (watchdog timeout in the driver)", "reset"),
    13: ("graphics engine exception, usually an illegal access by the application", "app"),
    31: ("GPU memory page fault (MMU fault), usually an application bug", "app"),
    32: ("invalid or corrupted push buffer stream (often PCIe trouble)", "reset"),
    38: ("driver firmware error", "reset"),
    43: ("GPU stopped processing a channel after an application fault", "app"),
    45: ("preemptive cleanup after an earlier error; look for the first Xid", "app"),
    48: ("double-bit (uncorrectable) ECC error", "drain"),
    54: ("auxiliary power not connected", "drain"),
    56: ("display engine error", "reset"),
    57: ("error programming video memory interface", "drain"),
    61: ("internal micro-controller breakpoint or warning", "reset"),
    62: ("internal micro-controller halted", "drain"),
    63: ("ECC page retirement or row remapping recorded; a GPU reset applies it", "reset"),
    64: ("ECC page retirement or row remapping failed", "drain"),
    68: ("video processor exception", "reset"),
    69: ("graphics engine class error", "reset"),
    74: ("NVLink error", "drain"),
    79: ("GPU has fallen off the bus", "drain"),
    81: ("VGA subsystem error", "drain"),
    92: ("high single-bit ECC error rate", "reset"),
    94: ("contained ECC error; the affected application was stopped", "reset"),
    95: ("uncontained ECC error; every application on the GPU is affected", "drain"),
    109: ("context switch timeout", "reset"),
    119: ("GSP firmware RPC timeout", "reset"),
    120: ("GSP firmware error", "reset"),
    121: ("corrected NVLink error (C2C)", "reset"),
    122: ("SPI PMU RPC read failure", "reset"),
    123: ("SPI PMU RPC write failure", "reset"),
    136: ("NVLink link training or health event", "drain"),
    137: ("NVLink privilege or fabric access error", "drain"),
    140: ("unrecovered ECC error in GPU memory", "drain"),
    143: ("GPU initialisation failure", "drain"),
    144: ("NVLink NETIR link event", "drain"),
    145: ("NVLink RLW (receive/link-layer) error", "drain"),
    146: ("NVLink TLW (transmit) error", "drain"),
    147: ("NVLink TREX error", "drain"),
    148: ("NVLink power/control error", "drain"),
    149: ("NVLink NETIR fabric error", "drain"),
    150: ("NVLink ISO error", "drain"),
    154: ("GPU recovery action changed: reset or reboot required", "reset"),
}
_ACTION_RANK = {"app": 0, "reset": 1, "drain": 2}
_XID = rx(r"NVRM: Xid \((PCI:[^)]*)\): (\d+)(?:, pid=(\d+|'<unknown>'))?(?:, name=([^,]+))?(?:, (.*))?")
_HOST = rx(r"^(?:\w{3}\s+\d+\s+[\d:]+\s+|\S+T[\d:.+-]+\s+)(\S+) kernel:")
# the CUDA runtime's wording, and DCGM's diagnostic (dcgmi diag: "GPU 3 has uncorrectable memory errors and row
# remappings are pending"; a table cell may wrap before "remappings")
_ECC_RT = rx(r"uncorrectable ECC error encountered|ECC error detected.*uncorrectable|has uncorrectable memory errors"
             r"|row remappings? (?:are )?pending|row remapping failure")
_LOST = rx(r"GPU is lost|fallen off the bus|Reset required \[NV_ERR_RESET_REQUIRED\]|Unable to determine the device handle for GPU ?[0-9A-Fa-f:.]+: Unknown Error"
           r"|XidCriticalError: Xid=\d+")
_INIT = rx(r"RmInitAdapter failed|rm_init_adapter failed|Cannot attach gpu")
# AMD's ROCm runtime on a GPU fault: "HW Exception by GPU node-9 (Agent handle: 0x…) reason :GPU Hang"
_AMD_HW = rx(r"HW Exception by GPU node-(\d+).*?reason ?:\s*(.+?)\s*$", needs=("HW Exception by GPU",))
# the GPU System Processor (GSP) firmware no longer answering the driver: what Xid 119 reports, in the open kernel
# module's own dmesg lines, which a paste often holds without the Xid line
_GSP = rx(r"_kgspIsHeartbeatTimedOut: Heartbeat timed out|\*+ GSP Timeout \*+|_kgspLogRpcTimeout",
          needs=("kgsp", "GSP Timeout"))
# a GPU the PCI bus still shows but nvidia-smi no longer lists: one nvidia-smi table against lspci's count
_SMI_HEAD = rx(r"\|\s*NVIDIA-SMI \d")
_SMI_ROW = rx(r"^\|\s+(\d+)\s+\S.*\|\s+[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d\s")
_LSPCI_GPU = rx(r"^(?:[0-9a-fA-F]{4}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.\d (?:VGA compatible|3D) controller: NVIDIA")
_LSPCI_COUNT = rx(r"lspci\b.*(?i:nvidia).*(?:VGA|3D).*\|\s*wc -l|lspci\b.*(?:VGA|3D).*(?i:nvidia).*\|\s*wc -l")
_SMI = rx(r"^\s*(Pending|Remapping Failure Occurred|DRAM Uncorrectable|SRAM Uncorrectable|Pending Page Blacklist)"
          r"\s*:\s*(\S+)")


class XidParser(Parser):
    name = "gpu_xid"
    triggers = ("NVRM: Xid", "_kgspIsHeartbeatTimedOut", "GSP Timeout", "_kgspLogRpcTimeout", "NV_ERR_RESET_REQUIRED", "uncorrectable ECC error", "uncorrectable memory errors", "row remapping", "GPU is lost", "fallen off the bus", "Remapped Rows", "device handle",
                "XidCriticalError",
                "Remapping Failure Occurred", "Uncorrectable", "Pending Page Blacklist", "RmInitAdapter", "rm_init_adapter",
                "Cannot attach gpu", "NVIDIA-SMI", "0000:", "controller: NVIDIA", "lspci", "HW Exception by GPU")
    after = 4

    def __init__(self) -> None:
        super().__init__()
        self.xids: dict[int, dict[str, Any]] = {}
        self.pci: set[str] = set()
        self.hosts: set[str] = set()
        self.flags: set[str] = set()
        self.smi_tables = 0
        self.smi_gpus: set[int] = set()
        self.pci_gpus = 0
        self.pci_ev: tuple[int, str] | None = None
        self.amd: dict[str, str] = {}   # ROCm node -> the reason its runtime gave

    def _inventory(self, hit: Hit) -> bool:
        """nvidia-smi table rows and lspci's NVIDIA controllers, to notice a GPU the driver has lost."""
        t = hit.text
        if search(_SMI_HEAD, t):
            self.smi_tables += 1
        elif (m := search(_SMI_ROW, t)):
            self.smi_gpus.add(int(m.group(1)))
        elif search(_LSPCI_GPU, t):
            self.pci_gpus += 1
            self.pci_ev = self.pci_ev or (hit.no, t)
        elif search(_LSPCI_COUNT, t) and hit.after and hit.after[0].strip().isdigit():
            self.pci_gpus = max(self.pci_gpus, int(hit.after[0].strip()))
            self.pci_ev = (hit.no + 1, f"{t.strip()} -> {hit.after[0].strip()}")
        else:
            return False
        return True

    def feed(self, hit: Hit) -> None:
        t = hit.text
        if self._inventory(hit):
            return
        m = search(_XID, t)
        if m:
            x = int(m.group(2))
            rec = self.xids.setdefault(x, {"xid": x, "count": 0})
            rec["count"] += 1
            if m.group(5) and "detail" not in rec:
                rec["detail"] = m.group(5).strip()[:160]
            if m.group(1) not in ("PCI:...", "PCI:"):
                self.pci.add(m.group(1))
                rec.setdefault("pci", set()).add(m.group(1))
            h = search(_HOST, hit.cut + t if hit.cut else t)
            if h:
                self.hosts.add(h.group(1))
            self.ev.hit(hit, t)
            return
        if search(_ECC_RT, t):
            self.flags.add("ecc_uncorrectable")
            self.ev.hit(hit, t)
            return
        if search(_LOST, t):
            self.flags.add("gpu_lost")
            self.ev.hit(hit, t)
            return
        if search(_GSP, t):
            self.flags.add("gsp_timeout")
            self.ev.hit(hit, t)
            return
        m = search(_AMD_HW, t)
        if m:
            self.flags.add("amd_hw_exception")
            self.amd[m.group(1)] = m.group(2)
            self.ev.hit(hit, t)
            return
        if search(_INIT, t):
            self.flags.add("init_failed")
            self.ev.hit(hit, t)
            return
        lines = [(hit.no, t)] + ([(hit.no + 1 + i, a) for i, a in enumerate(hit.after)] if "Remapped Rows" in t else [])
        for no, line in lines:
            s = search(_SMI, line)
            if not s:
                continue
            key, val = s.group(1), s.group(2)
            bad = (key in ("Pending", "Remapping Failure Occurred", "Pending Page Blacklist") and val == "Yes") or \
                  (key.endswith("Uncorrectable") and val.isdigit() and int(val) > 0)
            if bad:
                self.flags.add({"Pending": "row_remap_pending", "Remapping Failure Occurred": "row_remap_failure",
                                "Pending Page Blacklist": "page_retirement_pending"}.get(key, "ecc_uncorrectable"))
                self.ev.add(no, line)

    def finish(self, ctx: Context) -> list[Finding]:
        f: dict[str, Any] = {}
        if self.smi_tables == 1 and self.smi_gpus and self.pci_gpus > len(self.smi_gpus) and self.pci_ev:
            self.flags.add("gpu_missing")
            f["gpus_listed"], f["gpus_on_pci"] = len(self.smi_gpus), self.pci_gpus
            self.ev.add(*self.pci_ev)
        if not self.xids and not self.flags:
            return []
        actions = []
        if self.xids:
            table = []
            for x, rec in sorted(self.xids.items()):
                meaning, action = XID_TABLE.get(x, ("unlisted Xid; check NVIDIA's Xid catalogue", "reset"))
                table.append({**rec, "meaning": meaning, "action": action}
                             | ({"pci": sorted(rec["pci"])} if "pci" in rec else {}))
                actions.append(action)
            f["xids"] = table
        flag_action = {"gpu_missing": "drain", "row_remap_failure": "drain", "ecc_uncorrectable": "drain", "gpu_lost": "drain", "init_failed": "drain",
                       "row_remap_pending": "reset", "page_retirement_pending": "reset", "gsp_timeout": "reset",
                       "amd_hw_exception": "reset"}
        actions += [flag_action[fl] for fl in self.flags]
        if self.flags:
            f["conditions"] = sorted(self.flags)
        f["action"] = max(actions, key=_ACTION_RANK.__getitem__)
        if self.pci:
            f["pci"] = sorted(self.pci)
        if self.hosts:
            f["hosts"] = sorted(self.hosts)
        if self.amd:
            f["vendor"] = "amd"
        if self.xids:
            worst = max(f["xids"], key=lambda r: (_ACTION_RANK[r["action"]], r["count"]))
            title = f"GPU Xid {worst['xid']}: {worst['meaning']}"
            others = [str(r["xid"]) for r in f["xids"] if r is not worst]
            if others:
                title += f" (also Xid {', '.join(others)})"
            rule = f"gpu_xid.xid{worst['xid']}"
            # the GPUs behind the action (to reset, or the reason to drain), when other Xids hit other GPUs
            acting = sorted({p for r in f["xids"] if r["action"] == f["action"] for p in r.get("pci", ())})
            if acting:
                f["action_pci"] = acting
        elif "gpu_lost" in self.flags:
            title, rule = "A GPU fell off the bus / is lost to the driver", "gpu_xid.gpu_lost"
        elif "gpu_missing" in self.flags:
            title, rule = (f"nvidia-smi lists {f['gpus_listed']} GPUs but the PCI bus shows {f['gpus_on_pci']}: "
                           "the driver has lost a GPU"), "gpu_xid.gpu_missing"
        elif "init_failed" in self.flags:
            title, rule = "The driver cannot initialise a GPU (RmInitAdapter failed)", "gpu_xid.init_failed"
        elif "ecc_uncorrectable" in self.flags:
            title, rule = "Uncorrectable ECC error in GPU memory", "gpu_xid.ecc"
        elif "gsp_timeout" in self.flags:
            title, rule = "The GPU's GSP firmware stopped answering the driver (what Xid 119 reports)", "gpu_xid.gsp_timeout"
        elif "amd_hw_exception" in self.flags:
            node, why = next(iter(sorted(self.amd.items())))
            title, rule = f"The ROCm runtime reports a GPU hardware exception ({why}) on GPU node {node}", "gpu_xid.amd_hw"
        elif "row_remap_failure" in self.flags:
            title, rule = "Row remapping failed on a GPU: its memory cannot be repaired", "gpu_xid.row_remap_failure"
        else:
            title, rule = "A GPU has memory repairs pending (row remap / page retirement) until it is reset", \
                "gpu_xid.remap_pending"
        where = self.hosts or f.get("action_pci") or self.pci
        if where:
            title += f" on {', '.join(sorted(where)[:3])}"
        title += {"drain": "; drain the node", "reset": "; reset the GPU", "app": "; usually the application"}[f["action"]]
        return [Finding(symptom="gpu_xid", rule=rule, title=title,
                        severity="critical" if f["action"] != "app" else "error", confidence=0.95,
                        evidence=self.ev.items, facts=f, first_line=self.ev.first())]


_SMI_GPU = rx(r"^GPU (\d+): (.+?)(?: \(UUID|$)")
# NVLink links per GPU when all are up, by model (nvidia-smi's name) and by the instance family that carries it
_LINKS_BY_MODEL = (("B300", 18), ("GB200", 18), ("B200", 18), ("H200", 18), ("H100", 18), ("A100", 12), ("V100", 6))
_SMI_LINK = rx(r"^\s*Link (\d+): (<inactive>|0 GB/s|Inactive|Down)")
_DCGM_GPU = rx(r"^\s*(gpuId|physicalId) (\d+):")
_DCGM_STATES = rx(r"^\s*([UDX_](?:\s+[UDX_])*)\s*$")
_FABRIC = rx(r"(?i)fabric ?manager (?:found but )?not (?:active|running)|fabric_manager_active\W*:\W*false"
             r"|all links are inactive|Failed to bind NVLink SHARP|nv-fabricmanager[^\n]*(?:fail|error)"
             r"|system not yet initialized|cudaErrorSystemNotReady|CUDA_ERROR_SYSTEM_NOT_READY",
             needs=("fabric manager", "fabricmanager", "fabric_manager", "links are inactive", "nvlink",
                    "not yet initialized", "notready", "not_ready"), fold=True)   # "libfabric" is not enough
_LINK_ERR = rx(r"(?i)uncorrectable NVLink error|P2P is disabled between NVLINK connected GPUs", needs=("nvlink",),
               fold=True)
_DIAG = rx(r"\|\s*(NVLink|PCIe)[^|]*\|\s*Fail\b|(\d+) (?:active )?NvLinks?.*expected (\d+)"
           r"|NVLink (?:link )?\d+ (?:is )?(?:down|inactive)", needs=("nvlink", "fail"), fold=True)


class NvlinkParser(Parser):
    name = "nvlink_inactive"
    # the fabric manager by name, not "abric": that woke this reader on every "via NET/AWS Libfabric" channel line;
    # "GPU <digit>", not "GPU ": that woke it on every "throughput per GPU" iteration line of every rank
    triggers = (*(f"GPU {d}" for d in range(10)), "Link ", "gpuId", "physicalId", "NVLink", "NvLink", "nvlink",
                "NVLINK", "abric manager", "abric Manager", "abricmanager", "abricManager", "abric_manager",
                "ABRIC_MANAGER", "not yet initialized", "SystemNotReady", "SYSTEM_NOT_READY")
    after = 1

    def __init__(self) -> None:
        super().__init__()
        self.gpu: str | None = None
        self.down: dict[str, list[int]] = {}
        self.total_links: dict[str, int] = {}
        self.diag_fail = False
        self.fabric = False
        self.link_error = False
        self.model = ""

    def feed(self, hit: Hit) -> None:
        t = hit.text
        head = t.lstrip()[:12]   # the anchored patterns run only on lines that start so: NCCL INFO lines say "GPU " a lot
        m = search(_SMI_GPU, t) if t.startswith("GPU ") else None
        if m:
            self.gpu = f"GPU {m.group(1)}"
            self.model = self.model or m.group(2).strip()
            return
        m = search(_SMI_LINK, t) if head.startswith("Link ") else None
        if m and self.gpu:
            self.down.setdefault(self.gpu, []).append(int(m.group(1)))
            self.ev.add(hit.no, f"{self.gpu}: {t.strip()}")
            return
        m = search(_DCGM_GPU, t) if head.startswith(("gpuId", "physicalId")) else None
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
        if search(_FABRIC, t):
            self.fabric = True
            self.ev.hit(hit, t)
            return
        if search(_LINK_ERR, t):
            self.link_error = True
            self.ev.hit(hit, t)
            return
        if search(_DIAG, t):
            m2 = search(_DIAG, t)
            if m2.group(2) and m2.group(3) and int(m2.group(2)) >= int(m2.group(3)):
                return
            self.diag_fail = True
            self.ev.hit(hit, t)

    def finish(self, ctx: Context) -> list[Finding]:
        if not self.down and not self.diag_fail and not self.fabric and not self.link_error:
            return []
        f: dict[str, Any] = {"links_down": {k: v for k, v in sorted(self.down.items())}}
        n = sum(len(v) for v in self.down.values())
        f["down_count"] = n
        if self.diag_fail:
            f["dcgm_diag_failed"] = True
        if self.fabric:
            f["fabric_down"] = True
        if self.link_error:
            f["link_error"] = True
        model = self.model
        expected = next((n for key, n in _LINKS_BY_MODEL if key in model), None)
        if expected is None:   # the GPU is not named: the instance family says which one it carries
            model = I.GPU_BY_FAMILY.get(str(ctx.job.get("instance_family", "")), "")
            expected = next((n for key, n in _LINKS_BY_MODEL if key in model), None)
        if expected:
            f["gpu_model"], f["expected_links"] = model, expected
        gpus = sorted(self.down)
        kind = "links_down" if n else "dcgm_diag" if self.diag_fail else "fabric" if self.fabric else "link_error"
        title = {"links_down": f"{n} NVLink link(s) down on {', '.join(gpus[:4])}{' and more' if len(gpus) > 4 else ''}",
                 "dcgm_diag": "DCGM diagnostics report an NVLink failure",
                 "fabric": "The NVLink fabric is not up (fabric manager / NVLink SHARP)",
                 "link_error": "An NVLink hardware error was reported (uncorrectable link error or P2P refused)"}[kind]
        title += ": GPU-to-GPU traffic inside the node is degraded or broken"
        return [Finding(symptom="nvlink_inactive", rule=f"nvlink_inactive.{kind}",
                        title=title, severity="critical", confidence=0.9, evidence=self.ev.items, facts=f,
                        first_line=self.ev.first())]


PARSERS = (XidParser, NvlinkParser)
