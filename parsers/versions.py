"""version_mismatch: driver, CUDA runtime, NCCL and plugin versions that do not fit together, or differ between ranks."""
from __future__ import annotations

from typing import Any

from core.models import Evidence, Finding
from parsers.scan.base import Context, Hit, Parser, rx, search

_RULES = (
    ("driver_library", rx(r"Driver/library version mismatch"), "The NVIDIA kernel module and user-space driver "
     "libraries differ (driver upgraded without a reboot)"),
    ("driver_too_old", rx(r"driver version is insufficient for CUDA runtime version|NVIDIA driver on your system is too "
                          r"old(?: \(found version (\d+)\))?|not supported in the installed CUDA driver"
                          r"|cudaErrorInsufficientDriver"), "The NVIDIA driver is too old for the CUDA runtime in use"),
    ("forward_compat", rx(r"Error 804|forward compatibility was attempted on non supported HW"),
     "CUDA forward-compatibility libraries were loaded on hardware or a driver that does not support them"),
    ("driver_mismatch", rx(r"Error 803|unsupported display driver / cuda driver combination"
                           r"|CUDA_ERROR_SYSTEM_DRIVER_MISMATCH"), "The CUDA user-space and kernel drivers disagree"),
    ("nccl_abi", rx(r"undefined(?: |%20)symbol:(?: |%20)(nccl\w+)|version `(NCCL_[\d.]+)' not found"),
     "The NCCL library loaded at run time is older than the one the program was built against"),
    # aws-ofi-nccl ignores an option Libfabric declines (EOPNOTSUPP), but one it has never heard of (ENOPROTOOPT, -92)
    # means the Libfabric loaded at run time predates the one the plugin was compiled against
    ("ofi_libfabric", rx(r"Couldn't set (FI_OPT_\w+)\. RC: -92\b"),
     "aws-ofi-nccl was built against a newer Libfabric than the one loaded at run time"),
    # the toolkit that builds an extension against the one PyTorch was built with: torch.utils.cpp_extension's check
    # and DeepSpeed's op builder's ("Installed CUDA version 12.0 does not match the version torch was compiled with
    # 11.7"); the version pair is what to read
    ("cuda_build", rx(r"detected CUDA version \(([\d.]+)\) mismatches the version that was used to compile PyTorch "
                      r"\(([\d.]+)\)|Installed CUDA version ([\d.]+) does not match the version torch was compiled "
                      r"with ([\d.]+)"), "The CUDA toolkit differs from the one PyTorch was built with"),
    # a CUDA toolkit (nvcc) older than the GPU it compiles for, and a PyTorch build without kernels for this GPU
    ("arch_unsupported", rx(r"nvcc fatal\s*:\s*Unsupported gpu architecture '(compute_\d+\w*)'"
                            r"|Value '(sm_\d+\w*)' is not defined for option 'gpu-architecture'"
                            r"|with CUDA capability (sm_\d+) is not compatible with the current PyTorch installation"
                            r"|no kernel image is available for execution on the device"),
     "The CUDA toolkit or the PyTorch build does not support this GPU's architecture"),
    # a compiled extension (a DeepSpeed op, flash-attn, apex, a JIT-built torch extension) that references a symbol the
    # loaded libraries lack: it was built against another PyTorch or CUDA than the one it is loaded with (the loader's
    # message also stands alone on its line where a traceback wraps the ImportError)
    ("extension_abi", rx(r"ImportError: (\S+\.so(?:\.\d+)*): undefined symbol: (\S+)"
                         r"|(?:OSError: |^\s*)(/?\S+\.so(?:\.\d+)*): undefined symbol: (\S+)"
                         r"|RuntimeError: operator (\w+)::(\w+) does not exist"),
     "A compiled extension was built against a different PyTorch or CUDA than the one it is loaded with"),
)


class VersionParser(Parser):
    name = "version_mismatch"
    triggers = ("insufficient for CUDA runtime", "driver on your system is too old", "forward compatibility was attempted",
                "Error 804", "Error 803", "not supported in the installed CUDA driver", "undefined symbol: nccl", "symbol:%20nccl",
                "version `NCCL", "mismatches the version that was used to compile", "Driver/library version mismatch",
                "unsupported display driver", "cudaErrorInsufficientDriver", "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
                "Couldn't set FI_OPT_", "does not match the version torch was compiled", "Unsupported gpu architecture",
                "is not defined for option 'gpu-architecture'", "is not compatible with the current PyTorch installation",
                "no kernel image is available", "undefined symbol: ", "does not exist")
    after = 1  # the CUDA build check's message wraps after "compile"; read it with the next line

    def __init__(self) -> None:
        super().__init__()
        self.hits: dict[str, int] = {}
        self.facts: dict[str, Any] = {}

    def feed(self, hit: Hit) -> None:
        text = " ".join(part.strip() for part in (hit.text, *hit.after))
        for rule, pat, _ in _RULES:
            m = search(pat, text)
            if not m:
                continue
            self.hits[rule] = self.hits.get(rule, 0) + 1
            self.ev.hit(hit)
            if rule == "driver_too_old" and m.group(1):
                n = int(m.group(1))
                self.facts.setdefault("driver_supports_cuda", f"{n // 1000}.{(n % 1000) // 10}")
            elif rule == "nccl_abi":
                self.facts.setdefault("missing", m.group(1) or m.group(2))
            elif rule == "ofi_libfabric":
                self.facts.setdefault("option", m.group(1))
            elif rule == "cuda_build":
                self.facts.setdefault("cuda_detected", m.group(1) or m.group(3))
                self.facts.setdefault("cuda_torch_built", m.group(2) or m.group(4))
            elif rule == "arch_unsupported" and (m.group(1) or m.group(2) or m.group(3)):
                self.facts.setdefault("missing", m.group(1) or m.group(2) or m.group(3))
            elif rule == "extension_abi":
                # (a paste in Markdown wraps it in ** or backticks)
                missing = m.group(2) or m.group(4) or f"{m.group(5)}::{m.group(6)}"
                self.facts.setdefault("missing", missing.strip("*`'\"")[:120])
                self.facts.setdefault("library", (m.group(1) or m.group(3) or m.group(5)).rsplit("/", 1)[-1].strip("*`'\"")[:120])
            return

    def finish(self, ctx: Context) -> list[Finding]:
        out: list[Finding] = []
        if self.hits:
            order = [r for r, _, _ in _RULES]
            rule = min(self.hits, key=order.index)
            title = dict((r, t) for r, _, t in _RULES)[rule]
            f = dict(self.facts)
            for k in ("driver", "driver_cuda", "cuda", "nccl", "torch", "libfabric", "aws_ofi_nccl"):
                if ctx.versions.get(k):
                    f.setdefault(k, ctx.versions[k])
            if f.get("driver_supports_cuda"):
                title += f" (driver supports CUDA {f['driver_supports_cuda']})"
            elif f.get("option"):
                title += f" (it does not know {f['option']})"
            out.append(Finding(symptom="version_mismatch", rule=f"version_mismatch.{rule}", title=title,
                               severity="critical", confidence=0.9, evidence=self.ev.items, facts=f,
                               first_line=self.ev.first()))
        drift = {k: v for k, v in ctx.versions_seen.items()
                 if k in ("nccl", "aws_ofi_nccl", "libfabric", "torch", "driver") and len(v) > 1}
        if drift:
            comp = sorted(drift)
            ev = sorted({seen for k in comp for seen in drift[k].values()})
            out.append(Finding(
                symptom="version_mismatch", rule="version_mismatch.ranks_disagree", severity="error", confidence=0.85,
                title="Ranks run different versions of " + ", ".join(
                    f"{k} ({' vs '.join(sorted(drift[k]))})" for k in comp),
                evidence=[Evidence(line=line, text=text) for line, text in ev[:5]],
                facts={"differing": {k: sorted(drift[k]) for k in comp}}, first_line=ev[0][0]))
        return out


PARSERS = (VersionParser,)
