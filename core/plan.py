"""`triage plan`: parallel layouts for a dense model before launch, with memory per GPU (the seeds' 000 §1.3 rules,
§2 memory math and §2.6 layouts by model size).

Candidates are every DP × TP × PP that uses all GPUs with TP inside a node (≤ 8) and PP dividing the layers, each
with the least sharding that fits. Memory per GPU = model states + activations of the first pipeline stage (which
holds PP micro-batches in flight under 1F1B) + a fixed reserve for NCCL buffers and the CUDA context:
- states, bytes per parameter on this GPU: 18 (mixed-precision Adam, nothing sharded), 6 + 12/DP (distributed
  optimizer / ZeRO-1), 4 + 16/DP (ZeRO-2), 18/DP plus the largest layer gathered (ZeRO-3);
- activations per layer and micro-batch with sequence parallelism: 34·s·b·h/TP bytes with selective recompute,
  2·s·b·h/TP with full recompute (Korthikanti et al.)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from core import layout

GIB = 2 ** 30
RESERVE_GIB = 3.0   # NCCL buffers, CUDA context, allocator slack
USABLE = 0.9        # plan for at most 90% of the GPU's memory
GPU_GIB = {"a100-40gb": 40, "a100-80gb": 80, "h100-80gb": 80, "h200": 141, "h200-141gb": 141, "b200": 180,
           "b200-180gb": 180, "b300": 288}
INSTANCES = (("p4d.24xlarge", "a100-40gb"), ("p4de.24xlarge", "a100-80gb"), ("p5.48xlarge", "h100-80gb"),
             ("p5en.48xlarge", "h200"), ("p6-b200.48xlarge", "b200"))
# Llama-style shapes by size: (parameters, layers, hidden, heads)
SHAPES = ((1.3e9, 24, 2048, 16), (2.7e9, 32, 2560, 32), (7e9, 32, 4096, 32), (13e9, 40, 5120, 40),
          (34e9, 48, 8192, 64), (70e9, 80, 8192, 64), (175e9, 96, 12288, 96), (405e9, 126, 16384, 128))
# the seed's starting points (000 §2.6): (max params, GPUs, tp, pp, dp, zero, note)
SEED_ROWS = ((7e9, 8, 1, 1, 8, 1, "≤ 7B on one node"), (13e9, 16, 1, 2, 8, 2, "≤ 13B on two nodes"),
             (70e9, 64, 8, 2, 4, 1, "30–70B, fast network: TP inside the node, PP across"),
             (70e9, 64, 4, 4, 4, 1, "30–70B, slow network: lean on PP"),
             (200e9, 512, 8, 8, 8, 1, "100–200B"))


class PlanError(ValueError):
    pass


def parse_count(text: str) -> float:
    m = re.fullmatch(r"\s*([\d.]+)\s*([kKmMbBtT]?)\s*", str(text))
    if not m:
        raise PlanError(f"'{text}' is not a parameter count (use 70B, 1.3B, 800M)")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[m.group(2).lower()]


@dataclass
class Model:
    params: float
    layers: int
    hidden: int
    heads: int
    seq_len: int = 4096

    @classmethod
    def of(cls, params: float, seq_len: int, layers=None, hidden=None, heads=None) -> "Model":
        _, l0, h0, a0 = min(SHAPES, key=lambda s: abs(math.log(s[0] / params)))
        return cls(params, layers or l0, hidden or h0, heads or a0, seq_len)


@dataclass
class Candidate:
    dp: int
    tp: int
    pp: int
    zero_stage: int
    recompute: str
    micro_batch: int
    states: float
    activations: float
    total: float
    fits: bool
    vpp: int | None = None
    why: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "ep": 1, "cp": 1, "vpp": self.vpp,
                "zero_stage": self.zero_stage, "recompute": self.recompute, "micro_batch": self.micro_batch,
                "memory_gib": {"states": self.states, "activations": self.activations, "total": self.total},
                "fits": self.fits, "why": self.why, "source": self.source}


def states_bytes_per_param(zero: int, dp: int) -> float:
    return {0: 18.0, 1: 6 + 12 / dp, 2: 4 + 16 / dp, 3: 18 / dp}[zero]


def memory(m: Model, tp: int, pp: int, dp: int, zero: int, recompute: str, mb: int) -> tuple[float, float, float]:
    local = m.params / (tp * pp)
    states = local * states_bytes_per_param(zero, dp)
    if zero == 3:
        states += 2 * 12 * m.hidden ** 2 / tp   # one layer's bf16 weights gathered at a time
    per_layer = (34 if recompute == "selective" else 2) * m.seq_len * mb * m.hidden / tp
    acts = per_layer * (m.layers / pp) * pp   # the first stage keeps PP micro-batches in flight
    s, a = states / GIB, acts / GIB
    return round(s, 1), round(a, 1), round(s + a + RESERVE_GIB, 1)


def candidates(m: Model, gpus: int, gpu_gib: float, network: str = "efa", mb: int = 1,
               per_node: int = layout.GPUS_PER_NODE) -> list[Candidate]:
    if gpus < 1:
        raise PlanError("--gpus must be at least 1")
    out: list[Candidate] = []
    for tp in (t for t in (1, 2, 4, 8) if t <= min(per_node, gpus)):
        for pp in (p for p in range(1, m.layers + 1) if m.layers % p == 0 and gpus % (tp * p) == 0):
            dp = gpus // (tp * pp)
            out.append(_best(m, tp, pp, dp, gpu_gib, mb))
    # layouts that fit, best first; then the ones that do not, closest to fitting first
    out.sort(key=lambda c: (not c.fits, round(cost(c, network), 4) if c.fits else c.total, c.total))
    return out


def bubble(pp: int, micro_batches: int | None = None) -> float:
    """Idle share of a 1F1B pipeline: (p − 1) / (m + p − 1), at the seeds' m = 4·p unless given."""
    m = micro_batches or 4 * pp
    return (pp - 1) / (m + pp - 1)


def cost(c: Candidate, network: str) -> float:
    """Lower is better: the pipeline bubble, tensor-parallel traffic (inside the node), deeper sharding and full
    recompute; on a slow network, data-parallel all-reduce across nodes weighs in too (the seeds: PP first there)."""
    out = bubble(c.pp) / (c.vpp or 1) + 0.05 * math.log2(c.tp) + {0: 0, 1: 0, 2: 0.05, 3: 0.15}[c.zero_stage]
    out += 0.2 if c.recompute == "full" else 0.0
    if network == "slow":
        out += 0.08 * math.log2(c.dp)
    return out


def _best(m: Model, tp: int, pp: int, dp: int, gpu_gib: float, mb: int) -> Candidate:
    """The least sharding and recomputation that fits; the last try when nothing does."""
    tries = [(z, r) for r in ("selective", "full") for z in (0, 1, 2, 3) if dp > 1 or z == 0]
    for zero, rec in tries:
        states, acts, total = memory(m, tp, pp, dp, zero, rec, mb)
        if total <= USABLE * gpu_gib:
            break
    c = Candidate(dp, tp, pp, zero, rec, mb, states, acts, total, total <= USABLE * gpu_gib,
                  vpp=layout.vpp_for({"num_layers": m.layers}, pp) if pp > 1 else None)
    c.why = _why(c, m, gpu_gib)
    c.source = ["000 §1.3 priorities", "000 §2 memory math"]
    return c


def _why(c: Candidate, m: Model, gpu_gib: float) -> list[str]:
    why = [f"{c.total:g} GiB of {gpu_gib:g} GiB per GPU ({'fits' if c.fits else 'does not fit'})"]
    why.append({0: "no sharding", 1: "distributed optimizer / ZeRO-1", 2: "ZeRO-2", 3: "ZeRO-3"}[c.zero_stage]
               + ("" if c.recompute == "selective" else ", full recompute"))
    if c.tp > 1:
        why.append(f"TP {c.tp} stays inside one node's NVLink")
    if c.pp > 1:
        why.append(f"PP {c.pp}: {m.layers // c.pp} layers per stage; keep ≥ {4 * c.pp} micro-batches per step "
                   f"(bubble {round(100 * bubble(c.pp))}% at 4×PP)"
                   + (f"; VPP {c.vpp} divides the stage" if c.vpp else ""))
    return why


def min_gpus(m: Model, gpu_gib: float) -> int:
    """GPUs needed to hold the model states alone at 1.5× headroom (18 bytes per parameter)."""
    return math.ceil(m.params * 18 * 1.5 / (gpu_gib * GIB))


def seed_rows(params: float) -> list[dict]:
    top = next((r[0] for r in SEED_ROWS if params <= r[0] * 1.05), SEED_ROWS[-1][0])
    return [{"gpus": g, "tp": t, "pp": p, "dp": d, "zero_stage": z, "note": n, "source": "000 §2.6"}
            for cap, g, t, p, d, z, n in SEED_ROWS if cap == top]


def choose_instance(m: Model, gpus: int, network: str, mb: int) -> tuple[str, str]:
    for instance, gpu in INSTANCES:
        if any(c.fits for c in candidates(m, gpus, GPU_GIB[gpu], network, mb)):
            return instance, gpu
    return INSTANCES[-1]


def job_memory(job: dict) -> dict:
    """The memory per GPU of the job's own config, when its arguments show enough of it (hidden size, layers and
    the parameter count or enough to estimate it), and what the OOM ladder's first rungs would save."""
    def num(key: str, default=None):
        v = job.get(key, default)
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 else None
    layers, hidden = num("num_layers"), num("hidden_size")
    if not layers or not hidden:
        return {}
    params = num("parameters") or 12 * layers * hidden ** 2   # the transformer blocks' weights
    tp, pp, mb = num("tensor_model_parallel_size", 1), num("pipeline_model_parallel_size", 1), num("micro_batch_size", 1)
    world = num("world_size")
    dp = num("data_parallel_size") or (world // (tp * pp) if world and world % (tp * pp) == 0 else 1)
    zero = num("zero_stage") or (1 if job.get("use_distributed_optimizer") is True else 0)
    recompute = "full" if job.get("recompute_granularity") == "full" else "selective"
    m = Model(params, int(layers), int(hidden), 1, int(num("seq_length", 4096)))
    states, acts, total = memory(m, int(tp), int(pp), int(dp), min(int(zero), 3), recompute, int(mb))
    out = {"mem_states_gib": states, "mem_activations_gib": acts, "mem_total_gib": total}
    if mb > 1:
        out["mem_saved_half_micro_gib"] = round(acts - memory(m, int(tp), int(pp), int(dp), min(int(zero), 3),
                                                              recompute, max(1, int(mb) // 2))[1], 1)
    nxt = layout.next_tp(job)
    if nxt:
        out["mem_saved_next_tp_gib"] = round(total - memory(m, nxt, int(pp), max(1, int(dp) * int(tp) // nxt),
                                                            min(int(zero), 3), recompute, int(mb))[2], 1)
    if job.get("recompute_granularity") == "selective":   # the log shows it: the next rung is full recomputation
        out["mem_saved_full_recompute_gib"] = round(acts - memory(m, int(tp), int(pp), int(dp), min(int(zero), 3),
                                                                  "full", int(mb))[1], 1)
    if dp > 1 and (zero == 0 or num("zero_stage") == 1):   # one sharding step further: ZeRO-1 / dist. optimizer, ZeRO-2
        out["mem_saved_more_sharding_gib"] = round(states - memory(m, int(tp), int(pp), int(dp), int(zero) + 1,
                                                                   recompute, int(mb))[0], 1)
    return out

