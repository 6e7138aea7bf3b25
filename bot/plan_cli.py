"""`triage plan`: candidate layouts with memory per GPU, as text for people or `triage.plan/v1` JSON."""
from __future__ import annotations

import json
import sys

from core import plan as P


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="parallel layouts and memory per GPU for a dense model, before launch")
    p.add_argument("--params", required=True, help="model size: 7B, 70B, 1.3B, 800M")
    p.add_argument("--gpus", required=True, type=int, help="GPUs in the job")
    p.add_argument("--gpu", choices=sorted(P.GPU_GIB), help="GPU type (default: the smallest P instance that fits)")
    p.add_argument("--seq-len", type=int, default=4096)
    p.add_argument("--layers", type=int, help="override the layer count of the size's usual shape")
    p.add_argument("--hidden", type=int, help="override the hidden size")
    p.add_argument("--heads", type=int, help="override the attention heads")
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--network", choices=("efa", "ib", "slow"), default="efa")
    p.add_argument("--top", type=int, default=5, help="candidates to show (default 5)")
    p.add_argument("--json", action="store_true", help="one triage.plan/v1 JSON object")
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
    opts = {"seq_len": "4096", "micro_batch": "1", "network": "efa", "top": "5"}
    bare: list[str] = []
    while tokens:
        t = tokens.pop(0)
        if t.startswith("--") and tokens:
            opts[t[2:].replace("-", "_")] = tokens.pop(0)
        elif t in ("efa", "ib", "slow"):
            opts["network"] = t
        else:
            bare.append(t)
    for key, value in zip(("params", "gpus", "gpu"), bare):
        opts.setdefault(key, value)
    try:
        if not str(opts.get("gpus", "0")).isdigit():
            raise P.PlanError(f"the GPU count must be a whole number, not '{opts['gpus']}'")
        args = SimpleNamespace(params=opts["params"], gpus=int(opts["gpus"]), gpu=opts.get("gpu"),
                               seq_len=int(opts["seq_len"]), micro_batch=int(opts["micro_batch"]),
                               network=opts["network"], top=int(opts["top"]), layers=_int(opts.get("layers")),
                               hidden=_int(opts.get("hidden")), heads=_int(opts.get("heads")))
        if args.gpu is not None and args.gpu not in P.GPU_GIB:
            raise P.PlanError(f"unknown GPU '{args.gpu}' (one of {', '.join(sorted(P.GPU_GIB))})")
        model = P.Model.of(P.parse_count(args.params), args.seq_len, args.layers, args.hidden, args.heads)
        instance, gpu = (None, args.gpu) if args.gpu else P.choose_instance(model, args.gpus, args.network, args.micro_batch)
        shown = P.candidates(model, args.gpus, P.GPU_GIB[gpu], args.network, args.micro_batch)[:max(1, args.top)]
    except KeyError as e:
        raise ValueError(f"plan: needs {e.args[0]}{example}") from None
    except (ValueError, P.PlanError) as e:
        raise ValueError(f"plan: {e}{example}") from None
    return _text(model, args, gpu, instance, P.min_gpus(model, P.GPU_GIB[gpu]), shown)


def _int(v: str | None) -> int | None:
    return int(v) if v is not None else None


def cmd_plan(args, settings) -> int:
    try:
        model = P.Model.of(P.parse_count(args.params), args.seq_len, args.layers, args.hidden, args.heads)
        instance = None
        gpu = args.gpu
        if gpu is None:
            instance, gpu = P.choose_instance(model, args.gpus, args.network, args.micro_batch)
        cands = P.candidates(model, args.gpus, P.GPU_GIB[gpu], args.network, args.micro_batch)
    except P.PlanError as e:
        print(f"triage: {e}", file=sys.stderr)
        return 2
    need = P.min_gpus(model, P.GPU_GIB[gpu])
    shown = cands[:max(1, args.top)]
    if args.json:
        doc = {"schema": "triage.plan/v1",
               "model": {"params": model.params, "layers": model.layers, "hidden": model.hidden, "heads": model.heads,
                         "seq_len": model.seq_len, "dense": True},
               "gpus": args.gpus, "gpu": gpu, "gpu_gib": P.GPU_GIB[gpu], "instance": instance, "network": args.network,
               "min_gpus": need, "seed_rows": P.seed_rows(model.params), "candidates": [c.to_json() for c in shown]}
        print(json.dumps(doc, ensure_ascii=False))
        return 0
    print(_text(model, args, gpu, instance, need, shown))
    return 0


def _text(model: P.Model, args, gpu: str, instance: str | None, need: int, shown: list[P.Candidate]) -> str:
    size = f"{model.params / 1e9:g}B"
    where = f"{args.gpus} × {gpu} ({P.GPU_GIB[gpu]} GiB)" + (f" — {instance}, the smallest P instance that fits"
                                                              if instance else "")
    out = [f"Plan for a {size} dense model ({model.layers} layers, hidden {model.hidden}, {model.heads} heads, "
           f"sequence {model.seq_len}) on {where}, {args.network} network.",
           f"Model states alone need at least {need} GPUs of {P.GPU_GIB[gpu]} GiB at 1.5× headroom "
           "(18 bytes per parameter)."]
    for row in P.seed_rows(model.params):
        out.append(f"Seed starting point ({row['source']}, {row['gpus']} GPUs): TP {row['tp']} · PP {row['pp']} · "
                   f"DP {row['dp']} · ZeRO {row['zero_stage']} — {row['note']}")
    if not any(c.fits for c in shown):
        out.append(f"No layout fits on {args.gpus} GPUs; the closest are listed.")
    out.append("Candidates, best first:")
    for i, c in enumerate(shown, 1):
        out.append(f" {i}. TP {c.tp} · PP {c.pp} · DP {c.dp} · ZeRO {c.zero_stage}"
                   + (f" · VPP {c.vpp}" if c.vpp else "") + f" · micro-batch {c.micro_batch} — {c.total:g} GiB per GPU "
                   f"(states {c.states:g} + activations {c.activations:g} + reserve {P.RESERVE_GIB:g})"
                   + ("" if c.fits else "  [does not fit]"))
        out.append("    " + "; ".join(c.why[1:]))
    return "\n".join(out)
