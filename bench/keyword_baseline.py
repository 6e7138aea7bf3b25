"""The yardstick from issue 12: an 11-rule keyword classifier of the kind anyone writes in minutes, scored per
symptom on corpus files beside `triage eval`, so the parsers are never worse than grep on any symptom.

    .venv/bin/python bench/keyword_baseline.py tests/corpus/wave5.jsonl [more.jsonl ...]

Prints, per label, how many cases each one gets right (first finding = label; a healthy case is right only with
no finding). The rules are deliberately naive: first match wins, in this order."""
from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RULES = (
    ("cuda_oom", r"(?i)out of memory|OutOfMemoryError"),
    ("gpu_xid", r"Xid|fallen off the bus"),
    ("nvlink_inactive", r"(?i)nvlink.*(inactive|down|error)"),
    ("efa_mr_registration", r"(?i)register (memory|MR)|fi_mr_reg"),
    ("efa_provider_missing", r"(?i)no providers|fi_getinfo"),
    ("fork_enomem", r"(?i)fork.*(cannot allocate memory|errno 12)"),
    ("nccl_timeout", r"(?i)timed? ?out"),
    ("version_mismatch", r"(?i)undefined symbol|version mismatch|mismatches the version"),
    ("loss_nan", r"(?i)loss\W{0,4}(nan|inf)\b"),
    ("tcp_fallback", r"NET/Socket"),
    ("nccl_error", r"NCCL error|NCCL WARN|ncclSystemError|ncclInternalError"),
)


def keyword_label(text: str) -> str:
    return next((label for label, pat in RULES if re.search(pat, text)), "none")


def main(paths: list[str]) -> int:
    from bot.cli.evaluate import Score, evaluate
    from engine import Engine
    from playbooks.engine import load
    engine, bot = Engine(load()), Score()
    total, kw_right = Counter(), Counter()
    for path in paths:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        evaluate(lines, engine, bot)
        for case in (json.loads(x) for x in lines if x.strip()):
            total[case["label"]] += 1
            kw_right[case["label"]] += keyword_label(case["text"]) in {case["label"], *case.get("also", [])}
    print(f"{'label':24} {'cases':>5} {'keywords':>9} {'triage':>7}")
    for label in sorted(total):
        worse = "  <- below keywords" if bot.tp[label] < kw_right[label] else ""
        print(f"{label:24} {total[label]:5} {kw_right[label]:9} {bot.tp[label]:7}{worse}")
    print(f"{'all':24} {sum(total.values()):5} {sum(kw_right.values()):9} {bot.correct:7}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
