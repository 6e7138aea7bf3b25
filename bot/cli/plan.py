"""`triage plan`: candidate layouts with memory per GPU for a dense or MoE model, as text for people or
`triage.plan/v1` JSON."""
from __future__ import annotations

import json
import sys

from bot.answer.plan import layouts, seed_rows, text_of
from core import plan as P


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="parallel layouts and memory per GPU for a dense or MoE model, before launch")
    p.add_argument("--params", help="model size: 7B, 70B, 1.3B, 800M")
    p.add_argument("--gpus", type=int, help="GPUs in the job")
    p.add_argument("--gpu", choices=sorted(P.GPU_GIB), help="GPU type (default: the smallest P instance that fits)")
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--layers", type=int, help="override the layer count of the size's usual shape")
    p.add_argument("--hidden", type=int, help="override the hidden size")
    p.add_argument("--heads", type=int, help="override the attention heads")
    p.add_argument("--experts", type=int, default=0, help="MoE: routed experts per layer (with --active-params)")
    p.add_argument("--active-params", help="MoE: parameters one token uses, e.g. 13B")
    p.add_argument("--top-k", type=int, default=2, help="MoE: experts per token (default 2)")
    p.add_argument("--vocab", type=int, help="vocabulary size (default: the shape's; counts the logits at PP 1)")
    p.add_argument("--no-sequence-parallel", dest="sp", action="store_false",
                   help="plan without Megatron's --sequence-parallel (activations then stay partly whole per TP rank)")
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--network", choices=("efa", "ib", "slow"), default="efa")
    p.add_argument("--top", type=int, default=5, help="candidates to show (default 5)")
    p.add_argument("--json", action="store_true", help="one triage.plan/v1 JSON object")
    p.add_argument("--accuracy", action="store_true",
                   help="the memory model against real Megatron runs (their printed memory lines), as a table")
    p.set_defaults(func=cmd_plan)


def cmd_plan(args, settings) -> int:
    if args.accuracy:
        from knowledge.plan_accuracy import rows, table
        print(json.dumps(rows(), ensure_ascii=False) if args.json else table())
        return 0
    if not args.params or not args.gpus:
        print("triage: plan needs --params and --gpus (e.g. triage plan --params 70B --gpus 64)", file=sys.stderr)
        return 2
    try:
        model, gpu, instance, cands = layouts(args)
    except P.PlanError as e:
        print(f"triage: {e}", file=sys.stderr)
        return 2
    need = P.min_gpus(model, P.GPU_GIB[gpu])
    shown = cands[:max(1, args.top)]
    if args.json:
        doc = {"schema": "triage.plan/v1",
               "model": {"params": model.params, "layers": model.layers, "hidden": model.hidden, "heads": model.heads,
                         "seq_len": model.seq_len, "dense": not model.experts, "experts": model.experts or None,
                         "top_k": model.top_k if model.experts else None, "active_params": model.active},
               "gpus": args.gpus, "gpu": gpu, "gpu_gib": P.GPU_GIB[gpu], "instance": instance, "network": args.network,
               "efa_gbps_per_node": args.efa_gbps, "network_planned": args.planned_network,
               "min_gpus": need, "seed_rows": seed_rows(model, args.gpus, gpu, args.micro_batch),
               "candidates": [c.to_json() for c in shown]}
        print(json.dumps(doc, ensure_ascii=False))
        return 0
    print(text_of(model, args, gpu, instance, need, shown))
    return 0
