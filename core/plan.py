"""`triage plan`: parallel layouts for a dense or MoE model before launch, with memory per GPU (the seeds' 000 §1.3
rules, §2 memory math and §2.6 layouts by model size).

Candidates are every DP × TP × PP × EP × CP that uses all GPUs (the seed's way of counting: for MoE, Megatron's
data-parallel size is DP × EP and EP is carved out of it) with TP inside a node (≤ 8), PP dividing the layers, EP
dividing the experts, CP only for sequences of 16k and more, each with the least sharding that fits. Memory per
GPU = model states + activations of the first pipeline stage (which holds PP micro-batches in flight under 1F1B)
+ a fixed reserve for NCCL buffers and the CUDA context:
- states, bytes per parameter on this GPU: 18 (mixed-precision Adam, nothing sharded), 6 + 12/N (distributed
  optimizer / ZeRO-1), 4 + 16/N (ZeRO-2), 18/N plus the largest layer gathered (ZeRO-3), where N is the ranks
  holding the same weights: DP × EP × CP for dense weights, DP × CP for an expert's (experts are split over EP
  and, as Megatron does by default, over TP);
- activations per layer and micro-batch with sequence parallelism, divided by TP × CP: 34·s·b·h bytes with
  selective recompute (Korthikanti et al.), 2·s·b·h with full recompute. An MoE layer keeps the attention part
  (15·s·b·h) and, for each of the top-k experts a token visits, the SwiGLU MLP's (3h + 6F)·s·b with F the expert's
  FFN size (from its parameter count), times the seed's capacity factor 1.25 for uneven routing; recomputing the
  MoE layers (Megatron's `--recompute-modules moe`) keeps only their input, 2·s·b·h;
- when the first stage is also the last (PP 1), the output logits at the loss: 10 bytes per vocabulary entry and
  token (bf16 logits, their fp32 copy and its gradient), divided by TP × CP (the vocabulary-parallel loss)."""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from core import layout

GIB = 2 ** 30
RESERVE_GIB = 3.0   # NCCL buffers, CUDA context, allocator slack
USABLE = 0.9        # plan for at most 90% of the GPU's memory
# GiB per GPU as the seed lists it (004, the AWS EC2 figures)
GPU_GIB = {"a100-40gb": 40, "a100-80gb": 80, "h100-80gb": 80, "h200": 141, "h200-141gb": 141, "b200": 179,
           "b200-180gb": 179, "b300": 269}
INSTANCES = (("p4d.24xlarge", "a100-40gb"), ("p4de.24xlarge", "a100-80gb"), ("p5.48xlarge", "h100-80gb"),
             ("p5en.48xlarge", "h200"), ("p6-b200.48xlarge", "b200"), ("p6-b300.48xlarge", "b300"))
# EFA per node in Gbps (004); at 400 Gbps, an eighth of p5's, a multi-node job is planned as on a slow network
EFA_GBPS = {"p4d.24xlarge": 400, "p4de.24xlarge": 400, "p5.48xlarge": 3200, "p5en.48xlarge": 3200,
            "p6-b200.48xlarge": 3200, "p6-b300.48xlarge": 6400}
SLOW_EFA_GBPS = 400
# Llama-style shapes by size: (parameters, layers, hidden, heads, vocabulary)
SHAPES = ((1.3e9, 24, 2048, 16, 50304), (2.7e9, 32, 2560, 32, 50304), (7e9, 32, 4096, 32, 32000),
          (13e9, 40, 5120, 40, 32000), (34e9, 48, 8192, 64, 32000), (70e9, 80, 8192, 64, 32000),
          (175e9, 96, 12288, 96, 51200), (405e9, 126, 16384, 128, 128256))
# public MoE shapes by total size, the same fields — Qwen3-30B-A3B, Mixtral 8x7B, gpt-oss-120b, Mixtral 8x22B,
# Qwen3-235B-A22B, DeepSeek-V3
MOE_SHAPES = ((30.5e9, 48, 2048, 32, 151936), (46.7e9, 32, 4096, 32, 32000), (117e9, 36, 2880, 64, 201088),
              (141e9, 56, 6144, 48, 32768), (235e9, 94, 4096, 64, 151936), (671e9, 61, 7168, 128, 129280))
LOGIT_BYTES = 10    # per vocabulary entry and token at the loss: bf16 logits, an fp32 copy and its gradient
CAPACITY = 1.25     # the seed's capacity factor (000 §2.1): headroom for tokens routed unevenly
LONG_SEQ = 16384    # context parallelism is considered from this sequence length on
# the seed's starting points (000 §2.6): (max params, GPUs, tp, pp, dp, zero, note)
SEED_ROWS = ((7e9, 8, 1, 1, 8, 1, "≤ 7B on one node"), (13e9, 16, 1, 2, 8, 2, "≤ 13B on two nodes"),
             (70e9, 64, 8, 2, 4, 1, "30–70B, fast network: TP inside the node, PP across"),
             (70e9, 64, 4, 4, 4, 1, "30–70B, slow network: lean on PP"),
             (200e9, 512, 8, 8, 8, 1, "100–200B"))
# MoE (000 §2.6): (max params, GPUs, dp, tp, pp, ep, note)
MOE_SEED_ROWS = ((30e9, 16, 2, 1, 2, 4, "≤ 30B: keep EP inside the node (2–4 experts per GPU)"),
                 (30e9, 32, 2, 2, 2, 4, "≤ 30B: keep EP inside the node (2–4 experts per GPU)"),
                 (70e9, 32, 2, 2, 2, 4, "≤ 70B: FSDP/ZeRO-3 by default, micro-batches ≥ stages"),
                 (70e9, 64, 2, 2, 2, 8, "≤ 70B: FSDP/ZeRO-3 by default, micro-batches ≥ stages"),
                 (200e9, 128, 2, 4, 4, 4, "≤ 200B: hierarchical all-to-all (inside, then across nodes), overlap"),
                 (200e9, 256, 2, 4, 4, 8, "≤ 200B: hierarchical all-to-all (inside, then across nodes), overlap"),
                 (500e9, 512, 2, 8, 8, 4, "≤ 500B: TP and EP inside the NVSwitch domain, EFA for PP/DP"),
                 (500e9, 1024, 2, 8, 8, 8, "≤ 500B: TP and EP inside the NVSwitch domain, EFA for PP/DP"),
                 (700e9, 1024, 2, 8, 8, 8, "700B: watch expert imbalance closely"),
                 (700e9, 1536, 3, 8, 8, 8, "700B: watch expert imbalance closely"))


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
    experts: int = 0            # routed experts per MoE layer; 0 for a dense model
    top_k: int = 2              # experts each token visits (the seed: top-1/2)
    active: float | None = None   # parameters one token uses (MoE)
    vocab: int = 0              # 0: logits not counted (the OOM path, when the log does not show the vocabulary)
    sp: bool = True             # sequence parallelism with TP (Megatron's --sequence-parallel)

    @classmethod
    def of(cls, params: float, seq_len: int, layers=None, hidden=None, heads=None, experts: int = 0,
           active: float | None = None, top_k: int = 2, vocab: int | None = None, sp: bool = True) -> "Model":
        if experts:
            if experts < 2 or not active or not 0 < active < params or not 0 < top_k < experts:
                raise PlanError("an MoE model needs --experts ≥ 2, --active-params below --params and "
                                "--top-k below --experts")
        _, l0, h0, a0, v0 = min(MOE_SHAPES if experts else SHAPES, key=lambda s: abs(math.log(s[0] / params)))
        return cls(params, layers or l0, hidden or h0, heads or a0, seq_len, experts, top_k, active,
                   v0 if vocab is None else vocab, sp)

    @property
    def expert_params(self) -> float:
        """All routed experts' weights: total = shared + E·e and active = shared + k·e give one expert's e."""
        return 0.0 if not self.experts else (self.params - self.active) / (self.experts - self.top_k) * self.experts

    def mlp_bytes_per_token(self) -> float:
        """Activation bytes of one layer's MLP per token, before the TP × CP split: the dense 19·h, or for MoE the
        top-k experts' SwiGLU MLPs (3h + 6F each, F from one expert's weights in one layer = 3·h·F)."""
        if not self.experts:
            return 19 * self.hidden
        ffn = self.expert_params / self.experts / self.layers / (3 * self.hidden)
        return self.top_k * CAPACITY * (3 * self.hidden + 6 * ffn)


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
    vpp_layers: int = 0   # layers per virtual stage, with vpp
    ep: int = 1
    cp: int = 1
    sequence_parallel: bool = True
    why: list[str] = field(default_factory=list)
    source: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"dp": self.dp, "tp": self.tp, "pp": self.pp, "ep": self.ep, "cp": self.cp, "vpp": self.vpp,
                "zero_stage": self.zero_stage, "recompute": self.recompute, "micro_batch": self.micro_batch,
                "memory_gib": {"states": self.states, "activations": self.activations, "total": self.total},
                "fits": self.fits, "why": self.why, "source": self.source,
                "sequence_parallel": self.sequence_parallel and self.tp > 1, "megatron_args": self.megatron_args()}

    def megatron_args(self) -> str:
        out = f"--tensor-model-parallel-size {self.tp} --pipeline-model-parallel-size {self.pp}"
        out += f" --expert-model-parallel-size {self.ep}" if self.ep > 1 else ""
        out += f" --context-parallel-size {self.cp}" if self.cp > 1 else ""
        out += f" --num-layers-per-virtual-pipeline-stage {self.vpp_layers}" if self.vpp else ""
        out += " --sequence-parallel" if self.tp > 1 and self.sequence_parallel else ""
        rec = {"moe": "selective --recompute-modules core_attn moe"}.get(self.recompute, self.recompute)
        # Megatron's distributed optimizer is the ZeRO-1 figure; ZeRO-3 is its FSDP2 (not with PP); ZeRO-2 has none
        out += {1: " --use-distributed-optimizer", 3: " --use-torch-fsdp2" if self.pp == 1 else ""}.get(self.zero_stage, "")
        return out + f" --recompute-granularity {rec} --micro-batch-size {self.micro_batch}"


def states_bytes_per_param(zero: int, dp: int) -> float:
    return {0: 18.0, 1: 6 + 12 / dp, 2: 4 + 16 / dp, 3: 18 / dp}[zero]


def memory(m: Model, tp: int, pp: int, dp: int, zero: int, recompute: str, mb: int, ep: int = 1,
           cp: int = 1) -> tuple[float, float, float]:
    dense, experts = m.params - m.expert_params, m.expert_params
    states = (dense / (tp * pp) * states_bytes_per_param(zero, dp * ep * cp)
              + experts / (ep * tp * pp) * states_bytes_per_param(zero, dp * cp))
    if zero == 3:   # one layer's bf16 weights gathered at a time: its dense part and this EP rank's experts
        states += 2 * (dense / (tp * m.layers) + experts / (ep * tp * m.layers))
    per_token = {"selective": 15 * m.hidden + m.mlp_bytes_per_token(), "moe": 17 * m.hidden}.get(recompute, 2 * m.hidden)
    # without sequence parallelism the layer norms, dropout masks and residuals (10·s·b·h; the 2·s·b·h input under
    # full recompute) stay whole on every TP rank: Korthikanti et al.'s s·b·h·(10 + 24/t)
    whole = 0 if m.sp or tp == 1 else (2 if recompute == "full" else 10) * m.hidden
    per_layer = (whole + (per_token - whole) / tp) * m.seq_len * mb / cp
    acts = per_layer * (m.layers / pp) * pp   # the first stage keeps PP micro-batches in flight
    if pp == 1:   # the first stage is also the last: the logits at the loss
        acts += LOGIT_BYTES * m.vocab * m.seq_len * mb / (tp * cp)
    s, a = states / GIB, acts / GIB
    return round(s, 1), round(a, 1), round(s + a + RESERVE_GIB, 1)


def candidates(m: Model, gpus: int, gpu_gib: float, network: str = "efa", mb: int = 1,
               per_node: int = layout.GPUS_PER_NODE) -> list[Candidate]:
    if gpus < 1:
        raise PlanError("--gpus must be at least 1")
    cps = [c for c in (1, 2, 4, 8) if c == 1 or (m.seq_len >= LONG_SEQ and m.seq_len % (2 * c) == 0)]
    eps = [e for e in range(1, (m.experts or 1) + 1) if (m.experts or 1) % e == 0]
    out: list[Candidate] = []
    for tp in (t for t in (1, 2, 4, 8) if t <= min(per_node, gpus)):
        for cp in cps:
            for ep in (e for e in eps if gpus % (tp * cp * e) == 0):
                for pp in (p for p in range(1, m.layers + 1) if m.layers % p == 0 and gpus % (tp * cp * ep * p) == 0):
                    out.append(evaluate(m, tp, pp, gpus // (tp * cp * ep * pp), gpu_gib, mb, ep, cp, per_node))
    # layouts that fit, best first; then the ones that do not, closest to fitting first
    out.sort(key=lambda c: (not c.fits, round(cost(c, network, per_node), 4) if c.fits else c.total, c.total))
    return out


def bubble(pp: int, micro_batches: int | None = None) -> float:
    """Idle share of a 1F1B pipeline: (p − 1) / (m + p − 1), at the seeds' m = 4·p unless given."""
    return layout.bubble(pp, micro_batches or 4 * pp)


def cost(c: Candidate, network: str, per_node: int = layout.GPUS_PER_NODE) -> float:
    """Lower is better: the pipeline bubble, tensor- and context-parallel traffic, deeper sharding and full
    recompute; expert all-to-all that leaves the node (EP × TP beyond the NVLink domain, the seed: keep EP inside
    it); on a slow network, data-parallel all-reduce across nodes weighs in too (the seeds: PP first there)."""
    out = bubble(c.pp) / (c.vpp or 1) + 0.05 * math.log2(c.tp) + {0: 0, 1: 0, 2: 0.05, 3: 0.15}[c.zero_stage]
    out += {"full": 0.2, "moe": 0.1}.get(c.recompute, 0.0)
    out += 0.04 * math.log2(c.cp) + (0.03 if c.ep not in (1, 4, 8) else 0.0)   # the seed: try EP 4 or 8
    out += 0.1 * math.log2(c.ep * c.tp / per_node) if c.ep * c.tp > per_node else 0.0
    if network == "slow":
        out += 0.08 * math.log2(c.dp) + (0.1 * math.log2(c.ep * c.tp / per_node) if c.ep * c.tp > per_node else 0)
    return out


def evaluate(m: Model, tp: int, pp: int, dp: int, gpu_gib: float, mb: int, ep: int = 1, cp: int = 1,
             per_node: int = layout.GPUS_PER_NODE) -> Candidate:
    """One layout with the least sharding and recomputation that fits; the last try when nothing does."""
    ladder = ("selective", "moe", "full") if m.experts else ("selective", "full")
    tries = [(z, r) for r in ladder for z in (0, 1, 2, 3) if dp * ep * cp > 1 or z == 0]
    for zero, rec in tries:
        states, acts, total = memory(m, tp, pp, dp, zero, rec, mb, ep, cp)
        if total <= USABLE * gpu_gib:
            break
    vpp = layout.vpp_for({"num_layers": m.layers}, pp) if pp > 1 else None
    c = Candidate(dp, tp, pp, zero, rec, mb, states, acts, total, total <= USABLE * gpu_gib, vpp=vpp, ep=ep, cp=cp,
                  vpp_layers=m.layers // pp // vpp if vpp else 0, sequence_parallel=m.sp)
    c.why = _why(c, m, gpu_gib, per_node)
    c.source = ["000 §1.3 priorities", "000 §2 memory math"] + (["000 §2.6 MoE layouts"] if m.experts else [])
    return c


def _why(c: Candidate, m: Model, gpu_gib: float, per_node: int) -> list[str]:
    why = [f"{c.total:g} GiB of {gpu_gib:g} GiB per GPU ({'fits' if c.fits else 'does not fit'})"]
    why.append({0: "no sharding", 1: "distributed optimizer / ZeRO-1", 2: "ZeRO-2 (DeepSpeed or FSDP; Megatron has no "
                "ZeRO-2)", 3: "ZeRO-3 / FSDP" + ("" if c.pp == 1 else " (DeepSpeed: Megatron's FSDP2 does not take PP)")}
               [c.zero_stage] + {"full": ", full recompute", "moe": ", MoE layers recomputed"}.get(c.recompute, ""))
    if c.tp > 1:
        why.append(f"TP {c.tp} stays inside one node's NVLink"
                   + ("" if c.sequence_parallel else " (no sequence parallelism: norms and dropout stay whole per rank)"))
    if c.ep > 1:
        inside = c.ep * c.tp <= per_node
        n = m.experts // c.ep
        why.append(f"EP {c.ep}: {n} expert{'s' if n > 1 else ''} on each EP rank; EP × TP = {c.ep * c.tp} "
                   + ("inside one node, all-to-all over NVLink" if inside else
                      "spans nodes: all-to-all crosses the network, use hierarchical all-to-all and overlap"))
        why.append(f"Megatron data-parallel size {c.dp * c.ep * c.cp} (DP {c.dp} × EP {c.ep}"
                   + (f" × CP {c.cp}" if c.cp > 1 else "") + ")")
    if c.cp > 1:
        why.append(f"CP {c.cp}: each GPU holds {m.seq_len // c.cp} tokens of the {m.seq_len}-token sequence")
    if c.pp > 1:
        why.append(f"PP {c.pp}: {m.layers // c.pp} layers per stage; keep ≥ {4 * c.pp} micro-batches per step "
                   f"(bubble {round(100 * bubble(c.pp))}% at 4×PP)"
                   + (f"; VPP {c.vpp} divides the stage" if c.vpp else ""))
    return why


def seed_min_gpus(m: Model, gpu_gib: float) -> int:
    """The seed's checklist figure (000 §2): P × 12 bytes (fp16 weights 2 + gradients 2 + Adam states 8) over the
    GPU's memory, nothing else counted — a floor under what min_gpus counts."""
    return math.ceil(m.params * 12 / (gpu_gib * 1e9))


def min_gpus(m: Model, gpu_gib: float) -> int:
    """GPUs needed to hold the model states alone at 1.5× headroom (18 bytes per parameter)."""
    return math.ceil(m.params * 18 * 1.5 / (gpu_gib * GIB))


def seed_rows(params: float, moe: bool = False) -> list[dict]:
    rows = MOE_SEED_ROWS if moe else SEED_ROWS
    top = next((r[0] for r in rows if params <= r[0] * 1.05), rows[-1][0])
    if moe:
        return [{"gpus": g, "dp": d, "tp": t, "pp": p, "ep": e, "note": n, "source": "000 §2.6 MoE"}
                for cap, g, d, t, p, e, n in MOE_SEED_ROWS if cap == top]
    return [{"gpus": g, "tp": t, "pp": p, "dp": d, "zero_stage": z, "note": n, "source": "000 §2.6"}
            for cap, g, t, p, d, z, n in SEED_ROWS if cap == top]


def instance_of(gpu: str) -> str:
    """The P instance that carries this GPU type."""
    return next(i for i, g in INSTANCES if GPU_GIB[g] == GPU_GIB[gpu] and g[:4] == gpu[:4])


def network_for(network: str, instance: str, gpus: int, per_node: int = layout.GPUS_PER_NODE) -> str:
    """What the plan ranks for: EFA at 400 Gbps per node across nodes is the seed's slow network (PP first)."""
    slow = network == "efa" and gpus > per_node and EFA_GBPS.get(instance, SLOW_EFA_GBPS + 1) <= SLOW_EFA_GBPS
    return "slow" if slow else network


def choose_instance(m: Model, gpus: int, network: str, mb: int) -> tuple[str, str]:
    for instance, gpu in INSTANCES:
        if any(c.fits for c in candidates(m, gpus, GPU_GIB[gpu], network_for(network, instance, gpus), mb)):
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
    base = {"tp": int(tp), "pp": int(pp), "dp": int(dp), "zero": min(int(zero), 3), "recompute": recompute, "mb": int(mb)}

    def mem(**kw) -> tuple[float, float, float]:
        a = {**base, **kw}
        return memory(m, a["tp"], a["pp"], a["dp"], a["zero"], a["recompute"], a["mb"])
    states, acts, total = mem()
    out = {"mem_states_gib": states, "mem_activations_gib": acts, "mem_total_gib": total}
    if mb > 1:
        out["mem_saved_half_micro_gib"] = round(acts - mem(mb=max(1, int(mb) // 2))[1], 1)
    nxt = layout.next_tp(job)
    if nxt:
        out["mem_saved_next_tp_gib"] = round(total - mem(tp=nxt, dp=max(1, int(dp) * int(tp) // nxt))[2], 1)
    nxt_pp = layout.next_pp(job)
    if nxt_pp:   # more stages shrink the states; the first stage keeps PP micro-batches of layers/PP in flight
        out["mem_saved_next_pp_gib"] = round(total - mem(pp=nxt_pp, dp=max(1, int(dp) * int(pp) // nxt_pp))[2], 1)
    if job.get("recompute_granularity") == "selective":   # the log shows it: the next rung is full recomputation
        out["mem_saved_full_recompute_gib"] = round(acts - mem(recompute="full")[1], 1)
    if dp > 1 and (zero == 0 or num("zero_stage") == 1):   # one sharding step further: ZeRO-1 / dist. optimizer, ZeRO-2
        out["mem_saved_more_sharding_gib"] = round(states - mem(zero=int(zero) + 1)[0], 1)
    if num("zero_stage") is not None and int(zero) < 3:   # DeepSpeed's last rung: ZeRO-3, optimizer state on the CPU
        on_gpu = params / (tp * pp) * 4 / dp + 2 * params / (tp * layers)   # bf16 weights and grads, one layer gathered
        out["mem_saved_zero3_offload_gib"] = round(states - on_gpu / GIB, 1)
    return out
