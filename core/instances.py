"""Instance and GPU facts the parsers and the weekly report compare against (from the runbook's instance facts):
the GPU each P-family instance carries, its dense BF16 peak, and the nccl-tests bus bandwidth its fabric should
carry — inside one node over NVLink, and across nodes over EFA."""
from __future__ import annotations

import re

GPU_BY_FAMILY = {"p4d": "A100", "p4de": "A100", "p5": "H100", "p5e": "H200", "p5en": "H200", "p6-b200": "B200",
                 "p6-b300": "B300", "p6e-gb200": "GB200", "g5": "A10G"}
# dense BF16 peak TFLOP/s; the first key found in a GPU's name wins (so "A10G" before "A10")
PEAK_TFLOPS = (("B300", 2250.0), ("GB200", 2250.0), ("B200", 2250.0), ("H200", 989.0), ("H100", 989.0),
               ("A100", 312.0), ("A10G", 125.0), ("L40S", 362.0), ("A10", 125.0))
# GB/s a ring-style collective's busbw should reach at large sizes: (one GPU's NVLink share inside a node,
# the node's EFA total across nodes)
EXPECTED_BUSBW = {"p4d": (300.0, 50.0), "p4de": (300.0, 50.0), "p5": (450.0, 400.0), "p5e": (450.0, 400.0),
                  "p5en": (450.0, 400.0), "p6-b200": (900.0, 400.0), "p6-b300": (900.0, 800.0)}
# the instance family a GPU's name points to, when the log names no instance type (the first key found wins)
INSTANCE_BY_GPU = (("B300", "p6-b300"), ("GB200", "p6e-gb200"), ("B200", "p6-b200"), ("H200", "p5en"),
                   ("H100", "p5"), ("A100", "p4d"))
BUSBW_OK = 0.7   # below 70% of that, the fabric is not doing its job
RING_OPS = ("all_reduce", "reduce_scatter", "all_gather")   # the collectives EXPECTED_BUSBW describes
MIN_JUDGED_BYTES = 64 << 20   # small messages are latency-bound: judge on large ones, never on the average


def instance_for_gpu(gpu: str) -> str | None:
    """The AWS instance a GPU model stands for, matched as a whole model name: a GH200 (Grace Hopper, not sold as a
    p-instance) is no H200, so it names no instance and no fabric is assumed for it."""
    if not gpu:
        return None
    return next((inst for key, inst in INSTANCE_BY_GPU if re.search(rf"(?<![A-Z0-9]){key}(?![0-9])", gpu)), None)


def peak_tflops(gpu: str) -> float | None:
    return next((p for key, p in PEAK_TFLOPS if key in gpu), None)


def expected_busbw(instance: str | None, nodes: int | None) -> float | None:
    exp = EXPECTED_BUSBW.get(instance or "")
    return None if exp is None else exp[1] if (nodes or 1) > 1 else exp[0]


# A data-centre GPU of the A100 generation or later is never built into a multi-node cluster with less than 100 Gb/s
# of RDMA fabric per node (1x EDR/HDR100 InfiniBand, 100 GbE RoCE, one Slingshot-10 NIC): a ring collective across
# such nodes that stays under 70% of 12.5 GB/s is slow whatever the fabric is
FABRIC_FLOOR_GBPS = 12.5
FLOOR_GPUS = ("A100", "H100", "H200", "GH200", "H800", "A800", "B200", "GB200", "B300", "MI250", "MI300", "MI325", "MI355")


def fabric_floor(op: str | None, gpu: str | None, nodes: int | None, message_bytes: int) -> float | None:
    """What a multi-node ring collective on GPUs the text names should beat at least, when no instance says more."""
    if op not in RING_OPS or message_bytes < MIN_JUDGED_BYTES or (nodes or 1) < 2 or not gpu:
        return None
    named = any(re.search(rf"(?<![A-Z0-9]){key}(?![0-9])", gpu) for key in FLOOR_GPUS)
    return FABRIC_FLOOR_GBPS if named else None


def busbw_ceiling(op: str | None, instance: str | None, nodes: int | None, message_bytes: int) -> float | None:
    """What a benchmark's bus bandwidth at its largest message should reach, or None when nothing says: the figures
    are for the ring collectives only (none for alltoall, broadcast or sendrecv), and only large messages say anything
    about the fabric."""
    if op not in RING_OPS or message_bytes < MIN_JUDGED_BYTES:
        return None
    return expected_busbw(instance, nodes)
