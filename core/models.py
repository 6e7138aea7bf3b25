"""The typed contract every layer shares: parsers emit Findings, playbooks attach Steps, bot renders a Diagnosis.

Plain standard-library dataclasses, not pydantic: these are built by our own code on every diagnosis, and a
one-shot `triage diagnose` should not pay pydantic's model machinery at start-up (issue 6). The enumerated
fields are still checked when an object is made, and `Diagnosis.from_dict` reads back what `to_json_dict` wrote
(the store), refusing unknown keys."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from core.symptoms import IDS

SCHEMA = "triage.diagnosis/v1"

SYMPTOMS = IDS   # from the registry (core.symptoms)

SEVERITIES = ("critical", "error", "warning")
OWNERS = ("ml", "infra")
CHANGE_KINDS = ("env", "flag", "config", "command")
Scalar = str | int | float | bool | None


def _one_of(value: Any, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise ValueError(f"{what} must be one of {', '.join(allowed)}, not {value!r}")


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    unknown = set(data) - names
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown field(s) {', '.join(sorted(unknown))}")
    return data


@dataclass(slots=True, kw_only=True)
class Evidence:
    line: int
    text: str
    source: str | None = None   # "file:line" when several files were read as one (the line number runs on)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"line": self.line, "text": self.text}
        if self.source is not None:
            out["source"] = self.source
        return out

    @property
    def where(self) -> str:
        return self.source or f"line {self.line}"


@dataclass(slots=True, kw_only=True)
class Change:
    kind: str
    name: str
    to: Scalar = None
    from_: Scalar = None      # "from" in JSON
    note: str | None = None

    def __post_init__(self) -> None:
        _one_of(self.kind, CHANGE_KINDS, "Change.kind")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "name": self.name, "to": self.to}
        if self.from_ is not None:
            out["from"] = self.from_
        if self.note is not None:
            out["note"] = self.note
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Change":
        data = dict(data)
        if "from" in data:
            data["from_"] = data.pop("from")
        return cls(**_known(cls, data))


@dataclass(slots=True, kw_only=True)
class Step:
    id: str
    owner: str
    text: str
    changes: list[Change] = field(default_factory=list)
    cite: list[str] = field(default_factory=list)
    cleanup: bool = False     # environment hygiene, not the root cause's fix ("cleanup": true in JSON, only when so)

    def __post_init__(self) -> None:
        _one_of(self.owner, OWNERS, "Step.owner")

    def to_dict(self) -> dict[str, Any]:
        out = {"id": self.id, "owner": self.owner, "text": self.text,
               "changes": [c.to_dict() for c in self.changes], "cite": list(self.cite)}
        if self.cleanup:
            out["cleanup"] = True
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Step":
        data = _known(cls, dict(data))
        data["changes"] = [Change.from_dict(c) for c in data.get("changes", [])]
        return cls(**data)


@dataclass(slots=True, kw_only=True)
class Finding:
    symptom: str
    rule: str
    title: str
    severity: str
    confidence: float
    evidence: list[Evidence] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
    caused_by: str | None = None
    steps: list[Step] = field(default_factory=list)
    first_line: int = 0  # where the failure first shows; used to order root causes in time (not in the JSON)

    def __post_init__(self) -> None:
        _one_of(self.severity, SEVERITIES, "Finding.severity")
        self.evidence = list(self.evidence)   # never alias a parser's own list

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"symptom": self.symptom, "rule": self.rule, "title": self.title,
                               "severity": self.severity, "confidence": self.confidence,
                               "evidence": [e.to_dict() for e in self.evidence], "facts": _copy(self.facts)}
        if self.caused_by is not None:
            out["caused_by"] = self.caused_by
        out["steps"] = [s.to_dict() for s in self.steps]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Finding":
        data = _known(cls, dict(data))
        data["evidence"] = [Evidence(**e) for e in data.get("evidence", [])]
        data["steps"] = [Step.from_dict(s) for s in data.get("steps", [])]
        return cls(**data)


@dataclass(slots=True, kw_only=True)
class InputInfo:
    name: str
    bytes: int
    lines: int
    truncated: bool = False
    notes: list[str] = field(default_factory=list)   # what was skipped or capped, in words
    parts: list[dict[str, Any]] = field(default_factory=list)   # files read as one: name, first_line, lines

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.parts:
            del out["parts"]
        return out


@dataclass(slots=True, kw_only=True)
class Diagnosis:
    input: InputInfo
    versions: dict[str, str | None] = field(default_factory=dict)
    job: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    benchmarks: list[dict[str, Any]] = field(default_factory=list)   # parsed nccl-tests tables
    unclaimed: list[dict[str, Any]] = field(default_factory=list)    # error-looking line templates no parser explained
    step_time: dict[str, Any] = field(default_factory=dict)   # the step-time series summarised (facts, not findings)
    schema_: str = SCHEMA     # "schema" in JSON

    def to_json_dict(self) -> dict[str, Any]:
        return {"schema": self.schema_, "input": self.input.to_dict(), "versions": dict(self.versions),
                "job": _copy(self.job), "findings": [f.to_dict() for f in self.findings],
                "benchmarks": _copy(self.benchmarks), "unclaimed": _copy(self.unclaimed),
                "step_time": _copy(self.step_time)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Diagnosis":
        data = dict(data)
        if "schema" in data:
            data["schema_"] = data.pop("schema")
        data = _known(cls, data)
        if data.get("schema_", SCHEMA) != SCHEMA:
            raise ValueError(f"Diagnosis: unsupported schema {data['schema_']!r}")
        data["input"] = InputInfo(**data["input"])
        data["findings"] = [Finding.from_dict(f) for f in data.get("findings", [])]
        return cls(**data)


def _copy(v: Any) -> Any:
    """A deep copy of JSON-shaped data, so a dumped dict never aliases the live diagnosis."""
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_copy(x) for x in v]
    return v
