"""A plan as text for people: `triage plan` prints it, and `/diagnose plan …` in Slack answers with it (the words
after `plan` read here, with no argparse: it would print usage to the bot's stderr and exit)."""
from __future__ import annotations

from core import plan as P


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
        model, gpu, instance, cands = layouts(args)
    except KeyError as e:
        raise ValueError(f"plan: needs {e.args[0]}{example}") from None
    except (ValueError, P.PlanError) as e:
        raise ValueError(f"plan: {e}{example}") from None
    return text_of(model, args, gpu, instance, P.min_gpus(model, P.GPU_GIB[gpu]), cands[:max(1, args.top)])


def _whole(key: str, v: str | None) -> int | None:
    if v is None and key != "gpus":
        return None
    if v is None or not str(v).isdigit():
        raise P.PlanError(f"--{key.replace('_', '-')} must be a whole number, not '{v}'" if v is not None
                          else "needs the GPU count")
    return int(v)


def layouts(args) -> tuple[P.Model, str, str | None, list[P.Candidate]]:
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


def seed_rows(model: P.Model, gpus: int, gpu: str, mb: int) -> list[dict]:
    """The seed's starting rows for this size; a row for this GPU count gets its memory estimate beside it."""
    rows = P.seed_rows(model.params, bool(model.experts))
    for row in rows:
        if row["gpus"] == gpus and (row.get("ep", 1) == 1 or model.experts % row["ep"] == 0) \
                and model.layers % row["pp"] == 0:
            c = P.evaluate(model, row["tp"], row["pp"], row["dp"], P.GPU_GIB[gpu], mb, row.get("ep", 1))
            row["memory_gib"], row["fits"], row["zero_stage_needed"] = c.total, c.fits, c.zero_stage
    return rows


def _gb(n: float) -> str:
    return f"{n / 1e12:.3g} TB" if n >= 1e12 else f"{n / 1e9:.3g} GB"


def text_of(model: P.Model, args, gpu: str, instance: str | None, need: int, shown: list[P.Candidate]) -> str:
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
           f"(18 bytes per parameter; the seed's rule of thumb, P × 12 bytes for fp16 Adam = "
           f"{_gb(model.params * 12)}, gives {P.seed_min_gpus(model, P.GPU_GIB[gpu])} before activations and "
           "headroom: 000 §2)."]
    for row in seed_rows(model, args.gpus, gpu, args.micro_batch):
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
