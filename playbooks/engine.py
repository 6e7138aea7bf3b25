"""Deterministic remediation: a Finding plus the log's versions and job settings in, ordered Steps out.

Pure: no I/O except loading the YAML files, no randomness, no clock. Conditions and computed values read
`facts.*` (from the finding), `job.*` (settings seen in the log, plus the memory math), `versions.*` and `rule`."""
from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from core import frameworks as FW
from core import job as J
from core import layout, plan
from core import versions as V
from core.models import Change, Finding, Step
from playbooks import rules as team_rules
from playbooks.check import COMPUTE_OPS, PLACEHOLDER, Checker

BUILTIN = Path(__file__).parent
MAX_STEPS = 12


class PlaybookError(Exception):
    pass


@dataclass(frozen=True)
class Book:
    """One validated playbook as plain data: the pydantic schema's dump (every field present, `from` as `from_`,
    a computed value as a dict)."""
    path: Path
    playbook: dict[str, Any]


class Books(list):
    """The validated playbooks (a list of Book), and the teams' detection rules loaded with them (`rules`: each a
    dict of id, symptom, pattern, literal, severity, title, confidence, file)."""
    rules: tuple[dict[str, Any], ...] = ()


def load(extra_dirs: Iterable[str | Path] = (), cache: str | Path | None = None) -> Books:
    """User directories come first so their steps win over built-in steps with the same id.

    Every file is validated against `playbooks/schema.py` and then against what exists (playbooks.check: symptom
ids, fact/job/version paths, runbook citations), built-in files too. With `cache`, the validated form is kept there under a
    hash of the file and the schema, so a later start-up with unchanged files skips YAML and pydantic entirely."""
    books, rules = Books(), []
    cache = Path(cache) if cache else None
    schema = (BUILTIN / "schema.py").read_bytes() if cache else b""   # part of every cache key: read it once
    check = Checker()
    for d in [*extra_dirs, BUILTIN]:
        d = Path(d)
        if not d.is_dir():
            raise PlaybookError(f"{d}: playbook directory does not exist")
        for path in sorted(d.glob("*.yaml")):
            data = _validated(path, cache, schema)
            problem = team_rules.check(data) or check.file(data)
            if problem:
                raise PlaybookError(f"{path}: {problem}")
            books.extend(Book(path, pb) for pb in data["playbooks"])
            rules += [{**r, "file": str(path)} for r in data.get("rules", [])]
    seen: dict[str, str] = {}
    for r in rules:
        if r["id"] in seen:
            raise PlaybookError(f"{r['file']}: rule id '{r['id']}' is already used in {seen[r['id']]}")
        seen[r["id"]] = r["file"]
    books.rules = tuple(rules)
    return books


def _validated(path: Path, cache: Path | None, schema: bytes) -> dict[str, Any]:
    raw = path.read_bytes()
    if cache is None:
        return _validate(path, raw)
    import hashlib
    key = hashlib.sha256(schema + b"\0" + raw).hexdigest()
    hit = cache / f"{key}.json"
    try:
        data = json.loads(hit.read_text(encoding="utf-8"))
        if isinstance(data, dict) and isinstance(data.get("playbooks"), list):
            return data
    except (OSError, ValueError):
        pass
    data = _validate(path, raw)
    try:
        import tempfile
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=cache, suffix=".tmp", delete=False, encoding="utf-8") as f:
            json.dump(data, f, ensure_ascii=False)
        os.replace(f.name, hit)
    except OSError:
        pass   # an unwritable cache only costs start-up time
    return data


def _validate(path: Path, raw: bytes) -> dict[str, Any]:
    import yaml
    from pydantic import ValidationError

    from playbooks.schema import PlaybookFile
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when the wheel has it: 10x faster
    try:
        text = raw.decode("utf-8")
        # no aliases: a few hundred bytes of nested *refs expand to gigabytes when loaded (a "billion laughs")
        if "*" in text and any(isinstance(e, yaml.AliasEvent) for e in yaml.parse(text, Loader=loader)):
            raise PlaybookError(f"{path}: YAML aliases (*name) are not accepted in a playbook file; write the value out")
        data = yaml.load(text, Loader=loader)
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise PlaybookError(f"{path}: not valid YAML: {e}") from None
    try:
        return PlaybookFile.model_validate(data).model_dump()
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors()[:3])
        raise PlaybookError(f"{path}: {problems}") from None


def derived_job(job: dict[str, Any]) -> dict[str, Any]:
    """The runbook's memory math, when the log shows the parameter count, and the next valid layout sizes."""
    out = dict(job)
    out.update(layout.derived(job))
    out.update(plan.job_memory(job))
    p = job.get("parameters")
    if isinstance(p, (int, float)) and p > 0:
        fp32, mixed, gpus, twelve = J.DERIVED_KEYS[:4]
        out[twelve] = round(p * 12 / 2**30, 1)
        out[fp32] = round(p * 16 / 2**30, 1)
        out[mixed] = round(p * 18 / 2**30, 1)
        out[gpus] = math.ceil(p * 18 * 1.5 / (80 * 2**30))
    return out


# Settings a finding proves whatever the log printed: a collapsing fp16 loss scaler means the job runs fp16.
IMPLIED = {"loss_nan.scale_collapse": {"fp16": True}}


def steps_for(finding: Finding, versions: dict[str, Any], job: dict[str, Any], books: list[Book],
              lang: str = "en") -> list[Step]:
    job = {**IMPLIED.get(finding.rule, {}), **job}
    scope = {"facts": finding.facts, "job": derived_job(job), "versions": versions, "rule": finding.rule,
             "symptom": finding.symptom, "version_rules": V.evaluate(versions), "lang": lang}
    steps: list[Step] = []
    seen: set[str] = set()
    given: set[tuple] = set()   # changes an earlier step of this answer already recommends
    # the root cause's own steps first; environment hygiene (`cleanup: true` playbooks) after all of them
    for book in sorted(books, key=lambda b: b.playbook.get("cleanup", False)):
        pb = book.playbook
        symptoms = pb["symptom"] if isinstance(pb["symptom"], list) else [pb["symptom"]]
        if finding.symptom not in symptoms or not _all(pb["when"], scope):
            continue
        for spec in pb["steps"]:
            if spec["id"] in seen or not _all(spec["when"], scope):
                continue
            seen.add(spec["id"])
            changes = [c for spec_c in spec["changes"] if _all(spec_c["when"], scope)
                       for c in _changes(spec_c, scope) if _useful(c, given)]
            text = spec["text_ko"] if lang == "ko" and spec["text_ko"] else spec["text"]
            steps.append(Step(id=spec["id"], owner=spec["owner"], text=_fill(text, scope), changes=changes,
                              cite=list(spec["cite"]), cleanup=bool(pb.get("cleanup"))))
    return steps[:MAX_STEPS]


def _useful(c: Change, given: set[tuple]) -> bool:
    """Never a no-op (the log shows the value already is the target) nor the same change twice in one answer."""
    if c.kind != "command" and c.from_ is not None and str(c.from_).lower() == str(c.to).lower():
        return False
    key = (c.kind, c.name, str(c.to))
    if key in given:
        return False
    given.add(key)
    return True


def lookup(scope: dict[str, Any], path: str) -> Any:
    cur: Any = scope
    for part in path.split("."):
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        else:
            return None
    return cur


def _holds(c: dict[str, Any], scope: dict[str, Any]) -> bool:
    op, v = c["op"], lookup(scope, c["path"])
    if op == "exists":
        return v is not None
    if op == "missing":
        return v is None
    if op == "nonempty":
        return bool(v)
    if op == "nin":   # not one of these, or not shown at all
        return v is None or v not in c["value"]
    if op == "lacks":   # a list or text without this item, or nothing shown
        return v is None or not (isinstance(v, (list, str, dict)) and c["value"] in v)
    if v is None:
        return False
    want = c["value"]
    if op == "in":
        return v in want  # type: ignore[operator]
    if op == "contains":
        return want in v if isinstance(v, (list, str, dict)) else False
    if c["path"].startswith("versions."):
        return V.compare(v, op, want)
    try:
        return {"eq": v == want, "ne": v != want, "lt": v < want, "le": v <= want, "gt": v > want,
                "ge": v >= want}[op]
    except TypeError:
        return False


def _all(conds: list[dict[str, Any]], scope: dict[str, Any]) -> bool:
    return all(_holds(c, scope) for c in conds)


def _value(spec: Any, scope: dict[str, Any]) -> Any:
    """A scalar as it is; a computed value (a dict in the validated form) from the scope."""
    if not isinstance(spec, dict):
        return spec
    op = next(k for k in COMPUTE_OPS if spec[k])
    v = lookup(scope, spec[op])
    if v is None or (op != "ref" and not isinstance(v, (int, float))):
        return spec["default"]
    if op == "ref":
        return v
    by, lo, hi = spec["by"], spec["min"], spec["max"]
    out = {"halve": lambda: v / 2, "double": lambda: v * 2, "div": lambda: v / by,
           "add": lambda: v + by, "mul": lambda: v * by}[op]()
    if lo is not None:
        out = max(out, lo)
    if hi is not None:
        out = min(out, hi)
    if isinstance(v, int) and op in ("halve", "div"):
        out = max(int(out), int(lo) if lo is not None else 0)
    elif float(out).is_integer() and isinstance(v, int):
        out = int(out)
    else:
        out = round(out, 6)
    return out


def _changes(c: dict[str, Any], scope: dict[str, Any]) -> list[Change]:
    """A change spec as the job's own changes: none where the job has no such setting or does not show the owner of
    a raw name (a DeepSpeed key on a job without DeepSpeed); a setting in its framework's name and units, with the
    setting it displaces removed where the log shows it (Megatron's --fp16 when --bf16 goes in)."""
    to, from_ = _value(c["to"], scope), _value(c["from_"], scope)
    job, lang = scope["job"], scope.get("lang", "en")
    spec_note = c["note_ko"] if lang == "ko" and c.get("note_ko") else c["note"]
    if c["kind"] != "setting":
        owner = FW.owner_of(c["kind"], c["name"])
        if owner is not None and not FW.shows(job, owner):
            return []
        sep = "," if c["kind"] == "command" else ", "   # a command takes a list as one word (nodename=a,b)
        note = _fill(spec_note, scope, sep) if spec_note else None
        return [Change(kind=c["kind"], name=_fill(c["name"], scope, sep, people=False), to=to, from_=from_, note=note)]
    own = FW.name_for(c["name"], job.get("framework"), job.get("sharding_engine"), lang)
    if own is None:
        return []   # this framework has no such setting
    if own.value is not None:
        to = own.value(to)
        from_ = None if from_ is None or isinstance(from_, bool) else own.value(from_)   # a generic on/off is not the framework's literal
    out = [Change(kind=own.kind, name=own.name, to=to, from_=from_,
                  note="; ".join(n for n in (spec_note, own.note) if n) or None)]
    if own.drop and to is True:
        kind, name, key, value = own.drop
        if job.get(key) is True:
            out.append(Change(kind=kind, name=name, to=value, from_=True, note=None if value is not None else "remove it"))
        else:
            out[0].note = "; ".join(n for n in (out[0].note, FW.phrase("drop", lang, name=name)) if n)
    return out


def _fill(text: str, scope: dict[str, Any], sep: str = ", ", people: bool = True) -> str:
    """Placeholders filled from the scope; in text for people, a count of a million or more reads 70B, 350M."""
    def sub(m: re.Match) -> str:
        v = lookup(scope, m.group(1))
        if v is None:
            return "(?)"
        if isinstance(v, list):
            return sep.join(str(x) for x in v)
        if people and isinstance(v, int) and not isinstance(v, bool) and abs(v) >= 10**6:
            return _count(v)
        return str(v)
    return PLACEHOLDER.sub(sub, text)


def _count(n: int) -> str:
    """70553706496 -> 70.6B; rounded first, so 999.99B reads 1T, not 1e+03B."""
    units = (("T", 10**12), ("B", 10**9), ("M", 10**6))
    for i, (unit, size) in enumerate(units):
        if abs(n) >= size or i == len(units) - 1 and abs(n) >= 10**6:
            shown = float(f"{n / size:.3g}")
            if abs(shown) >= 1000 and i > 0:
                unit, size = units[i - 1]
                shown = float(f"{n / size:.3g}")
            return f"{shown:g}{unit}"
    return str(n)
