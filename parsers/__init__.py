"""Parsers, one module per symptom family (the family stem names its playbook and runbook page too), listed
explicitly. Each module exposes PARSERS, its Parser classes; collectors (no symptoms) live in parsers.collectors."""
from parsers import convergence, efa, gpu, hangs, moe, nccl_errors, oom, versions
from parsers.collectors import COLLECTORS

PARSERS = (
    *oom.PARSERS,
    *hangs.PARSERS,
    *nccl_errors.PARSERS,
    *efa.PARSERS,
    *convergence.PARSERS,
    *gpu.PARSERS,
    *versions.PARSERS,
    *moe.PARSERS,
)
# What the scanner feeds, in a fixed order: the context collector, the parsers, the other collectors.
READERS = (COLLECTORS[0], *PARSERS, *COLLECTORS[1:])

__all__ = ["COLLECTORS", "PARSERS", "READERS"]
