"""`triage plan`: candidate layouts with memory per GPU for a dense or MoE model, as text for people or
`triage.plan/v1` JSON."""
from __future__ import annotations

import json
import sys

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


def plan_text(words: str) -> str:
    """`/diagnose plan 70B 64 h100-80gb [slow]` or `/diagnose plan --params 70B --gpus 64 …`: the plan as text; a
    ValueError with one line on bad input (no argparse here: it would print usage to the bot's stderr and exit)."""
    import shlex
    from types import SimpleNamespace
    example = " (e.g. /diagnose plan 70B 64 h100-80gb)"
    try:
        tokens = shlex.split(words)
    except ValueError as e:
        raise ValueError(f"plan: {e}{example}") from None
    opts = {"seq_len": "4096", "micro_batch": "1", "network": "efa", "top": "5", "experts": "0", "top_k": "2"}
    bare: list[str] = []
    while tokens:
        t = tokens.pop(0)
        if t == "--no-sequence-parallel":
            opts["sp"] = False
        elif t.startswith("--") and tokens:
            opts[t[2:].replace("-", "_")] = tokens.pop(0)
        elif t in ("efa", "ib", "slow"):
            opts["network"] = t
        else:
            bare.append(t)
    for key, value in zip(("params", "gpus", "gpu"), bare):
        opts.setdefault(key, value)
    try:
        whole = {k: _whole(k, opts.get(k)) for k in ("gpus", "seq_len", "micro_batch", "top", "layers", "hidden",
                                                      "heads", "experts", "top_k", "vocab")}
        args = SimpleNamespace(**whole, params=opts["params"], gpu=opts.get("gpu"), network=opts["network"],
                               active_params=opts.get("active_params"), sp=opts.get("sp", True))
        if args.gpu is not None and args.gpu not in P.GPU_GIB:
            raise P.PlanError(f"unknown GPU '{args.gpu}' (one of {', '.join(sorted(P.GPU_GIB))})")
        model, gpu, instance, cands = _plan(args)
    except KeyError as e:
        raise ValueError(f"plan: needs {e.args[0]}{example}") from None
    except (ValueError, P.PlanError) as e:
        raise ValueError(f"plan: {e}{example}") from None
    return _text(model, args, gpu, instance, P.min_gpus(model, P.GPU_GIB[gpu]), cands[:max(1, args.top)])


def _whole(key: str, v: str | None) -> int | None:
    if v is None and key != "gpus":
        return None
    if v is None or not str(v).isdigit():
        raise P.PlanError(f"--{key.replace('_', '-')} must be a whole number, not '{v}'" if v is not None
                          else "needs the GPU count")
    return int(v)


def _plan(args) -> tuple[P.Model, str, str | None, list[P.Candidate]]:
    if args.experts and not args.active_params:
        raise P.PlanError("an MoE model needs --active-params with --experts (e.g. --experts 8 --active-params 13B)")
    active = P.parse_count(args.active_params) if args.experts else None
    model = P.Model.of(P.parse_count(args.params), args.seq_len, args.layers, args.hidden, args.heads,
                       experts=args.experts, active=active, top_k=args.top_k, vocab=args.vocab,
                       sp=args.sp)
    instance, gpu = (None, args.gpu) if args.gpu else P.choose_instance(model, args.gpus, args.network, args.micro_batch)
    args.efa_gbps = P.EFA_GBPS[instance or P.instance_of(gpu)]
    args.planned_network = P.network_for(args.network, instance or P.instance_of(gpu), args.gpus)
    return model, gpu, instance, P.candidates(model, args.gpus, P.GPU_GIB[gpu], args.planned_network, args.micro_batch)


def cmd_plan(args, settings) -> int:
    if args.accuracy:
        from knowledge.plan_accuracy import rows, table
        print(json.dumps(rows(), ensure_ascii=False) if args.json else table())
        return 0
    if not args.params or not args.gpus:
        print("triage: plan needs --params and --gpus (e.g. triage plan --params 70B --gpus 64)", file=sys.stderr)
        return 2
    try:
        model, gpu, instance, cands = _plan(args)
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
               "min_gpus": need, "seed_rows": _seed_rows(model, args.gpus, gpu, args.micro_batch),
               "candidates": [c.to_json() for c in shown]}
        print(json.dumps(doc, ensure_ascii=False))
        return 0
    print(_text(model, args, gpu, instance, need, shown))
    return 0


def _seed_rows(model: P.Model, gpus: int, gpu: str, mb: int) -> list[dict]:
    """The seed's starting rows for this size; a row for this GPU count gets its memory estimate beside it."""
    rows = P.seed_rows(model.params, bool(model.experts))
    for row in rows:
        if row["gpus"] == gpus and (row.get("ep", 1) == 1 or model.experts % row["ep"] == 0) \
                and model.layers % row["pp"] == 0:
            c = P.evaluate(model, row["tp"], row["pp"], row["dp"], P.GPU_GIB[gpu], mb, row.get("ep", 1))
            row["memory_gib"], row["fits"], row["zero_stage_needed"] = c.total, c.fits, c.zero_stage
    return rows


def _text(model: P.Model, args, gpu: str, instance: str | None, need: int, shown: list[P.Candidate]) -> str:
    size = f"{model.params / 1e9:g}B"
    kind = (f"MoE model ({model.experts} experts, top-{model.top_k}, {model.active / 1e9:g}B active; "
            if model.experts else "dense model (")
    where = f"{args.gpus} × {gpu} ({P.GPU_GIB[gpu]} GiB)" + (f" — {instance}, the smallest P instance that fits"
                                                              if instance else "")
    out = [f"Plan for a {size} {kind}{model.layers} layers, hidden {model.hidden}, {model.heads} heads, "
           f"sequence {model.seq_len}) on {where}, {args.network} network"
           + (f" ({args.efa_gbps} Gbps EFA per node: planned as a slow network, PP "
              "first)." if args.planned_network != args.network else "."),
           f"Model states alone need at least {need} GPUs of {P.GPU_GIB[gpu]} GiB at 1.5× headroom "
           "(18 bytes per parameter)."]
    for row in _seed_rows(model, args.gpus, gpu, args.micro_batch):
        layout = f"DP {row['dp']} · TP {row['tp']} · PP {row['pp']}" + (f" · EP {row['ep']}" if "ep" in row else
                                                                       f" · ZeRO {row['zero_stage']}")
        mem = (f"; here {row['memory_gib']:g} GiB per GPU{'' if row['fits'] else ', does not fit'}"
               if "memory_gib" in row else "")
        needed = row.get("zero_stage_needed")
        if mem and "ep" not in row and needed is not None and needed > row["zero_stage"]:   # the figure is not the row's
            mem = (f"; here ZeRO {row['zero_stage']} does not fit: {row['memory_gib']:g} GiB per GPU needs ZeRO {needed}"
                   + ("" if row["fits"] else ", and still does not fit"))
        out.append(f"Seed starting point ({row['source']}, {row['gpus']} GPUs): {layout} — {row['note']}{mem}")
    if all(model.layers % p for p in range(2, model.layers)):
        out.append(f"{model.layers} layers have no divisor: only PP 1 is planned (uneven first and last stages, "
                   "Megatron's --decoder-first-pipeline-num-layers, are not).")
    if not any(c.fits for c in shown):
        out.append(f"No layout fits on {args.gpus} GPUs; the closest are listed.")
    out.append("Candidates, best first:")
    for i, c in enumerate(shown, 1):
        out.append(f" {i}. TP {c.tp} · PP {c.pp} · DP {c.dp}" + (f" · EP {c.ep}" if c.ep > 1 else "")
                   + (f" · CP {c.cp}" if c.cp > 1 else "") + f" · ZeRO {c.zero_stage}"
                   + (f" · VPP {c.vpp}" if c.vpp else "") + f" · micro-batch {c.micro_batch} — {c.total:g} GiB per GPU "
                   f"(states {c.states:g} + activations {c.activations:g} + reserve {P.RESERVE_GIB:g})"
                   + ("" if c.fits else "  [does not fit]"))
        out.append("    " + "; ".join(c.why[1:]))
        out.append("    Megatron: " + c.megatron_args())
    return "\n".join(out)
