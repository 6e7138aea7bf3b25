"""Software versions: the one way they are compared, and the version rules from the EFA/NCCL variable table.

A rule is data used twice: playbooks test it (`{path: version_rules.efa_sync_memops, op: eq, value: true}`) and
the weekly report lists the diagnoses where it holds. Each rule is true, false, or unknown (None) when the log
does not show every version it needs."""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

# The components a diagnosis reports (`versions` in the JSON) and the others playbooks may test.
REPORTED = ("nccl", "cuda", "torch", "aws_ofi_nccl", "libfabric", "efa_installer", "driver", "kernel")
COMPONENTS = (*REPORTED, "driver_cuda")


def parse(v: Any) -> tuple[int, ...] | None:
    """"2.19" and "2.19.0" are the same version: missing parts count as zero; suffixes after digits are ignored."""
    nums = re.findall(r"\d+", str(v))
    if not nums:
        return None
    parts = [int(n) for n in nums[:4]]
    return tuple(parts + [0] * (4 - len(parts)))


def compare(have: Any, op: str, want: Any) -> bool:
    a, b = parse(have), parse(want)
    if a is None or b is None:
        return False
    return {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[op]


@dataclass(frozen=True)
class VersionRule:
    id: str
    when: tuple[tuple[str, str, str], ...]   # (component, op, version), all must hold
    text: str                                # what the report says; {component} placeholders
    warn: bool = True                        # a problem the weekly report lists; False: a variable became unneeded

    def holds(self, versions: Mapping[str, Any]) -> bool | None:
        if any(not versions.get(c) for c, _, _ in self.when):
            return None
        return all(compare(versions[c], op, v) for c, op, v in self.when)


RULES: tuple[VersionRule, ...] = (
    VersionRule("efa_sync_memops", (("efa_installer", "lt", "1.29.1"), ("nccl", "ge", "2.19.0")),
                "efa-installer {efa_installer} with NCCL {nccl}: the pairing behind register_rail_mr_buffer RC -22 "
                "(upgrade efa-installer)"),
    VersionRule("libfabric_old", (("libfabric", "lt", "1.17"),), "libfabric {libfabric} is older than 1.17"),
    VersionRule("ofi_needs_provider", (("aws_ofi_nccl", "le", "1.5.0"),),
                "aws-ofi-nccl {aws_ofi_nccl} needs FI_PROVIDER=efa and NCCL_PROTO=simple; upgrade it"),
    # where a variable of the table stops being needed (steps to remove it test these)
    VersionRule("device_rdma_default", (("libfabric", "ge", "1.18.0"), ("aws_ofi_nccl", "ge", "1.7.0")),
                "libfabric {libfabric} and aws-ofi-nccl {aws_ofi_nccl} enable device RDMA themselves", warn=False),
    VersionRule("fork_safe_unneeded", (("kernel", "ge", "5.15"),),
                "kernel {kernel} does not need FI_EFA_FORK_SAFE", warn=False),
    VersionRule("fork_safe_needed", (("kernel", "lt", "5.15"),),
                "kernel {kernel} needs FI_EFA_FORK_SAFE=1 in a job that forks after EFA is up", warn=False),
    VersionRule("tuner_plugin_builtin", (("aws_ofi_nccl", "ge", "1.16.3"),),
                "aws-ofi-nccl {aws_ofi_nccl} loads its tuner without NCCL_TUNER_PLUGIN", warn=False),
)
BY_ID = {r.id: r for r in RULES}


def evaluate(versions: Mapping[str, Any]) -> dict[str, bool | None]:
    return {r.id: r.holds(versions) for r in RULES}


_OPS = {"lt": "<", "le": "≤", "gt": ">", "ge": "≥", "eq": "=", "ne": "≠"}
BEGIN, END = "<!-- version-rules: generated from core/versions.py by `make runbook` -->", "<!-- /version-rules -->"


def runbook_block() -> str:
    """The rules as the runbook shows them (knowledge/efa.md#versions), between the BEGIN and END markers."""
    lines = [f"- `{r.id}`: " + " and ".join(f"{c.replace('_', '-')} {_OPS[op]} {v}" for c, op, v in r.when)
             for r in RULES]
    return "\n".join([BEGIN, *lines, END])
