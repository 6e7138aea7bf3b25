"""`triage eval`: score a labelled corpus (one JSON object per line: id, label, also, text) with the real engine."""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

from core.ingest import UnusableInput, from_bytes
from engine import Engine


@dataclass
class Score:
    total: int = 0
    correct: int = 0
    tp: Counter = field(default_factory=Counter)
    fp: Counter = field(default_factory=Counter)
    fn: Counter = field(default_factory=Counter)
    wrong: list[tuple[str, str, str]] = field(default_factory=list)
    none_with_findings: int = 0

    @property
    def accuracy(self) -> float:
        return self.correct / self.total if self.total else 0.0


def evaluate(lines: list[str], engine: Engine) -> Score:
    sc = Score()
    for n, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            case = json.loads(raw)
            label, text = case["label"], case["text"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f"line {n}: not a corpus case (needs JSON with 'label' and 'text')") from None
        accepted = {label, *case.get("also", [])}
        try:
            got = [f.symptom for f in engine.diagnose(from_bytes(text.encode(), case.get("id", f"case{n}"))).findings]
        except UnusableInput:
            got = []
        top = got[0] if got else "none"
        ok = top in accepted or (label == "none" and not got)
        sc.total += 1
        sc.correct += ok
        if label == "none" and got:
            sc.none_with_findings += 1
        if ok:
            sc.tp[label] += 1
        else:
            sc.fn[label] += 1
            sc.fp[top] += 1
            sc.wrong.append((case.get("id", f"line {n}"), label, top))
    return sc


def report(sc: Score) -> str:
    out = [f"top-1 accuracy: {sc.correct}/{sc.total} = {sc.accuracy:.1%}",
           f"'none' cases with a finding: {sc.none_with_findings}", "",
           f"{'symptom':<22}{'n':>4}{'precision':>11}{'recall':>8}"]
    labels = sorted(set(sc.tp) | set(sc.fn) | set(sc.fp))
    for lab in labels:
        tp, fp, fn = sc.tp[lab], sc.fp[lab], sc.fn[lab]
        prec = f"{tp / (tp + fp):.2f}" if tp + fp else "-"
        rec = f"{tp / (tp + fn):.2f}" if tp + fn else "-"
        out.append(f"{lab:<22}{tp + fn:>4}{prec:>11}{rec:>8}")
    if sc.wrong:
        out += ["", "wrong:"] + [f"  {cid}: expected {lab}, got {got}" for cid, lab, got in sc.wrong]
    return "\n".join(out) + "\n"
