"""Deterministic text for people: root cause first, evidence with line numbers, steps with copyable changes."""
from __future__ import annotations

from core.models import Change, Diagnosis, Finding

OWNER = {"ml": "ML", "infra": "Infra"}


def change_text(c: Change) -> str:
    """One copyable line per change."""
    def fmt(v):
        return "true" if v is True else "false" if v is False else str(v)
    if c.kind == "env":
        text = f"export {c.name}={fmt(c.to)}" if c.to is not None else f"unset {c.name}"
        if c.from_ is not None:
            text += f"   # was {fmt(c.from_)}"
    elif c.kind == "flag":
        if c.to is True and c.from_ is None:
            text = c.name
        elif c.to is None:
            text = c.name
        else:
            text = f"{c.name} {fmt(c.from_)} → {fmt(c.to)}" if c.from_ is not None else f"{c.name} {fmt(c.to)}"
    elif c.kind == "config":
        if c.to is None:
            text = c.name
        else:
            text = f"{c.name}: {fmt(c.from_)} → {fmt(c.to)}" if c.from_ is not None else f"{c.name}: {fmt(c.to)}"
    else:
        text = f"$ {c.name}"
    if c.note:
        text += f"   ({c.note})"
    return text


def _facts(f: Finding) -> str:
    parts = []
    for k, v in f.facts.items():
        if isinstance(v, (list, dict)) and len(str(v)) > 80:
            v = str(v)[:77] + "..."
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def finding_text(f: Finding, index: int, verbose_steps: bool = True) -> list[str]:
    head = "ROOT CAUSE" if index == 0 else "ALSO"
    cause = f" (consequence of {f.caused_by})" if f.caused_by else ""
    out = [f"{head}  [{f.severity}] {f.symptom}{cause}: {f.title}"]
    if f.evidence:
        out.append("  evidence:")
        out += [f"    line {e.line}: {e.text[:240]}" for e in f.evidence]
    if f.facts:
        out.append(f"  facts: {_facts(f)}")
    if f.steps and verbose_steps:
        out.append("  steps:")
        for i, s in enumerate(f.steps, 1):
            out.append(f"    {i}. [{OWNER[s.owner]}] {s.text}")
            out += [f"         {change_text(c)}" for c in s.changes]
            out.append(f"         runbook: {', '.join(s.cite)}")
    return out


def diagnosis_text(d: Diagnosis) -> str:
    size = d.input.bytes
    human = f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 1024:.1f} KiB" if size >= 1024 else f"{size} B"
    lines = [f"== {d.input.name} ({d.input.lines} lines, {human}{', TRUNCATED' if d.input.truncated else ''}) =="]
    if not d.findings:
        lines.append("No known failure found. The log looks healthy for the symptoms Train Triage knows.")
    for i, f in enumerate(d.findings):
        # consequences repeat little: their steps are shown but kept short
        lines += finding_text(f, i, verbose_steps=(i == 0 or f.caused_by is None))
        lines.append("")
    versions = " · ".join(f"{k} {v}" for k, v in d.versions.items() if v)
    if versions:
        lines.append(f"versions: {versions}")
    return "\n".join(lines).rstrip() + "\n"
