"""Deterministic remediation: a Finding plus the log's versions and job settings in, ordered Steps out.

Pure: no I/O except loading the YAML files, no randomness, no clock. Conditions and computed values read
`facts.*` (from the finding), `job.*` (settings seen in the log, plus the memory math), `versions.*` and `rule`."""
from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import yaml
from pydantic import ValidationError

from core.models import Change, Finding, Step
from playbooks.schema import ChangeSpec, Compute, Condition, Playbook, PlaybookFile

BUILTIN = Path(__file__).parent
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when the wheel has it: 10x faster start-up
MAX_STEPS = 12


class PlaybookError(Exception):
    pass


@dataclass(frozen=True)
class Book:
    path: Path
    playbook: Playbook


def load(extra_dirs: Iterable[str | Path] = ()) -> list[Book]:
    """User directories come first so their steps win over built-in steps with the same id."""
    books: list[Book] = []
    for d in [*extra_dirs, BUILTIN]:
        d = Path(d)
        if not d.is_dir():
            raise PlaybookError(f"{d}: playbook directory does not exist")
        for path in sorted(d.glob("*.yaml")):
            books.extend(Book(path, pb) for pb in _parse(path).playbooks)
    return books


def load_from_env() -> list[Book]:
    extra = [p for p in os.environ.get("TRIAGE_PLAYBOOKS", "").split(os.pathsep) if p]
    return load(extra)


def _parse(path: Path) -> PlaybookFile:
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_LOADER)
    except yaml.YAMLError as e:
        raise PlaybookError(f"{path}: not valid YAML: {e}") from None
    try:
        return PlaybookFile.model_validate(data)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors()[:3])
        raise PlaybookError(f"{path}: {problems}") from None


def derived_job(job: dict[str, Any]) -> dict[str, Any]:
    """The runbook's memory math, when the log shows the parameter count."""
    out = dict(job)
    p = job.get("parameters")
    if isinstance(p, (int, float)) and p > 0:
        out["model_state_gib_fp32_adam"] = round(p * 16 / 2**30, 1)
        out["model_state_gib_mixed_adam"] = round(p * 18 / 2**30, 1)
        out["min_gpus_80gb"] = math.ceil(p * 18 * 1.5 / (80 * 2**30))
    return out


def steps_for(finding: Finding, versions: dict[str, Any], job: dict[str, Any], books: list[Book],
              lang: str = "en") -> list[Step]:
    scope = {"facts": finding.facts, "job": derived_job(job), "versions": versions, "rule": finding.rule,
             "symptom": finding.symptom}
    steps: list[Step] = []
    seen: set[str] = set()
    for book in books:
        pb = book.playbook
        symptoms = pb.symptom if isinstance(pb.symptom, list) else [pb.symptom]
        if finding.symptom not in symptoms or not _all(pb.when, scope):
            continue
        for spec in pb.steps:
            if spec.id in seen or not _all(spec.when, scope):
                continue
            seen.add(spec.id)
            changes = [_change(c, scope) for c in spec.changes if _all(c.when, scope)]
            text = spec.text_ko if lang == "ko" and spec.text_ko else spec.text
            steps.append(Step(id=spec.id, owner=spec.owner, text=_fill(text, scope), changes=changes,
                              cite=list(spec.cite)))
    return steps[:MAX_STEPS]


def lookup(scope: dict[str, Any], path: str) -> Any:
    cur: Any = scope
    for part in path.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            return None
    return cur


def _version(v: Any) -> tuple[int, ...] | None:
    nums = re.findall(r"\d+", str(v))
    return tuple(int(n) for n in nums[:4]) if nums else None


def _holds(c: Condition, scope: dict[str, Any]) -> bool:
    v = lookup(scope, c.path)
    if c.op == "exists":
        return v is not None
    if c.op == "missing":
        return v is None
    if c.op == "nonempty":
        return bool(v)
    if v is None:
        return False
    want = c.value
    if c.op == "in":
        return v in want  # type: ignore[operator]
    if c.op == "contains":
        return want in v if isinstance(v, (list, str, dict)) else False
    if c.path.startswith("versions."):
        v, want = _version(v), _version(want)
        if v is None or want is None:
            return False
    try:
        return {"eq": v == want, "ne": v != want, "lt": v < want, "le": v <= want, "gt": v > want,
                "ge": v >= want}[c.op]
    except TypeError:
        return False


def _all(conds: list[Condition], scope: dict[str, Any]) -> bool:
    return all(_holds(c, scope) for c in conds)


def _value(spec: Any, scope: dict[str, Any]) -> Any:
    if not isinstance(spec, Compute):
        return spec
    op = next(k for k in ("ref", "halve", "double", "div", "add", "mul") if getattr(spec, k))
    v = lookup(scope, getattr(spec, op))
    if v is None or (op != "ref" and not isinstance(v, (int, float))):
        return spec.default
    if op == "ref":
        return v
    out = {"halve": lambda: v / 2, "double": lambda: v * 2, "div": lambda: v / spec.by,
           "add": lambda: v + spec.by, "mul": lambda: v * spec.by}[op]()
    if spec.min is not None:
        out = max(out, spec.min)
    if spec.max is not None:
        out = min(out, spec.max)
    if isinstance(v, int) and op in ("halve", "div"):
        out = max(int(out), int(spec.min) if spec.min is not None else 0)
    elif float(out).is_integer() and isinstance(v, int):
        out = int(out)
    else:
        out = round(out, 6)
    return out


def _change(c: ChangeSpec, scope: dict[str, Any]) -> Change:
    return Change(kind=c.kind, name=_fill(c.name, scope), to=_value(c.to, scope),
                  from_=_value(c.from_, scope), note=c.note)


_PLACEHOLDER = re.compile(r"\{([a-z_]+(?:\.[A-Za-z0-9_]+)+)\}")


def _fill(text: str, scope: dict[str, Any]) -> str:
    def sub(m: re.Match) -> str:
        v = lookup(scope, m.group(1))
        if v is None:
            return "(?)"
        if isinstance(v, list):
            return ", ".join(str(x) for x in v)
        return str(v)
    return _PLACEHOLDER.sub(sub, text)
