"""Parallel layouts that are valid for this job: the next tensor-, pipeline- and virtual-pipeline size a playbook
may recommend, checked against what the log shows (seed 000 §1.3).

TP stays inside a node's NVLink domain (≤ 8 GPUs), PP divides the layer count, VPP divides the layers of a stage,
and TP × PP must divide the world size so that data parallelism stays a whole number. A rule the log gives no
number for cannot be checked and is not held against a candidate; when no candidate passes, there is no value."""
from __future__ import annotations

from typing import Any

GPUS_PER_NODE = 8
TP, PP = "tensor_model_parallel_size", "pipeline_model_parallel_size"
KEYS = ("next_tensor_model_parallel_size", "next_pipeline_model_parallel_size",
        "next_virtual_pipeline_model_parallel_size", "min_micro_batches")


def _int(job: dict[str, Any], key: str) -> int | None:
    v = job.get(key)
    return v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None


def _fits(job: dict[str, Any], tp: int, pp: int) -> bool:
    layers, world = _int(job, "num_layers"), _int(job, "world_size")
    return (layers is None or layers % pp == 0) and (world is None or world % (tp * pp) == 0)


def next_tp(job: dict[str, Any]) -> int | None:
    tp, pp = _int(job, TP), _int(job, PP) or 1
    if tp is None or tp * 2 > GPUS_PER_NODE:
        return None
    return tp * 2 if _fits(job, tp * 2, pp) else None


def next_pp(job: dict[str, Any]) -> int | None:
    """The smallest valid size from double the current one up; failing that, the smallest valid size above it."""
    tp, pp = _int(job, TP) or 1, _int(job, PP) or 1
    layers = _int(job, "num_layers")
    top = layers or pp * 2
    for p in [*range(pp * 2, top + 1), *range(pp + 1, min(pp * 2, top + 1))]:
        if _fits(job, tp, p):
            return p
    return None


def vpp_for(job: dict[str, Any], pp: int | None) -> int | None:
    """Legal virtual-pipeline sizes divide the layers of a stage; start in the middle of them (more virtual stages
    shrink the bubble but add point-to-point traffic). None when the stage cannot be split."""
    layers = _int(job, "num_layers")
    if pp is None or layers is None or layers % pp:
        return None
    per_stage = layers // pp
    legal = [d for d in range(2, per_stage) if per_stage % d == 0]
    return legal[(len(legal) - 1) // 2] if legal else None


def bubble(pp: int, micro_batches: int, virtual: int = 1) -> float:
    """Idle share of a 1F1B pipeline step: (p − 1) / (v·m + p − 1) for p stages, m micro-batches, v virtual stages."""
    return (pp - 1) / (virtual * micro_batches + pp - 1)


def derived(job: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    tp, pp = next_tp(job), next_pp(job)
    if tp:
        out[KEYS[0]] = tp
    if pp:
        out[KEYS[1]] = pp
        out[KEYS[3]] = 4 * pp   # the seeds' rule: at least 4 micro-batches per pipeline stage keeps the bubble small
        vpp = vpp_for(job, pp)
        if vpp:
            out[KEYS[2]] = vpp
    return out
