"""How close `triage plan`'s memory per GPU comes to what real Megatron runs used (issue 17): for each run in
megatron_memory.json, our model states against Megatron's own `Theoretical memory footprints: weight and optimizer`
line, and our states + activations against the allocator's `max allocated` peak (the plan's 3 GiB reserve for
NCCL and the CUDA context is left out: the allocator does not count it)."""
from __future__ import annotations

import json
from pathlib import Path

from core import plan as P

CASES = Path(__file__).with_name("megatron_memory.json")
MIB = 2 ** 20


def rows() -> list[dict]:
    out = []
    for case in json.loads(CASES.read_text(encoding="utf-8"))["cases"]:
        m, lay = case["model"], case["layout"]
        model = P.Model(m["params"], m["layers"], m["hidden"], m["heads"], m["seq_len"], m.get("experts", 0),
                        m.get("top_k", 2), m.get("active"), m["vocab"])
        states, acts, _ = P.memory(model, lay["tp"], lay["pp"], lay["dp"], lay["zero"], lay["recompute"],
                                   lay["micro_batch"], lay["ep"])
        real_states, real_peak = case["megatron_states_mib"] * MIB / P.GIB, case["max_allocated_mib"] * MIB / P.GIB
        out.append({"id": case["id"], "source": case["source"], "states": states,
                    "megatron_states": round(real_states, 1), "states_error": (states - real_states) / real_states,
                    "estimate": round(states + acts, 1), "max_allocated": round(real_peak, 1),
                    "error": (states + acts - real_peak) / real_peak})
    return out


def table() -> str:
    out = ["| case | our states GiB | Megatron's states GiB | error | our states + activations GiB | max allocated "
           "GiB | error |", "|---|---|---|---|---|---|---|"]
    for r in rows():
        out.append(f"| {r['id']} | {r['states']} | {r['megatron_states']} | {r['states_error']:+.1%} | "
                   f"{r['estimate']} | {r['max_allocated']} | {r['error']:+.1%} |")
    return "\n".join(out)
