"""The playbook file format, validated with pydantic (`extra="forbid"`): a typo in a playbook fails at start-up."""
from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from playbooks.check import COMPUTE_OPS

Scalar = Union[str, int, float, bool]
Op = Literal["exists", "missing", "eq", "ne", "lt", "le", "gt", "ge", "in", "nin", "contains", "lacks", "nonempty"]


class _M(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Condition(_M):
    path: str                       # facts.x, job.x, versions.x, rule
    op: Op
    value: Scalar | list[Scalar] | None = None

    @model_validator(mode="after")
    def _needs_value(self):
        if self.op not in ("exists", "missing", "nonempty") and self.value is None:
            raise ValueError(f"op '{self.op}' needs a value")
        return self


class Compute(_M):
    """A value computed from the log: exactly one operation on a path."""
    ref: str | None = None
    halve: str | None = None
    double: str | None = None
    div: str | None = None
    add: str | None = None
    mul: str | None = None
    by: float | None = None
    min: float | None = None
    max: float | None = None
    default: Scalar | None = None

    @model_validator(mode="after")
    def _one_op(self):
        ops = [k for k in COMPUTE_OPS if getattr(self, k)]
        if len(ops) != 1:
            raise ValueError("a computed value names exactly one of ref/halve/double/div/add/mul")
        if ops[0] in ("div", "add", "mul") and self.by is None:
            raise ValueError(f"'{ops[0]}' needs 'by'")
        return self


class ChangeSpec(_M):
    kind: Literal["env", "flag", "config", "command", "setting"]   # setting: a concept, named per framework
    name: str
    to: Scalar | Compute | None = None
    from_: Scalar | Compute | None = Field(default=None, alias="from")
    note: str | None = None
    note_ko: str | None = None
    when: list[Condition] = []


class StepSpec(_M):
    id: str
    owner: Literal["ml", "infra"]
    text: str
    text_ko: str | None = None
    when: list[Condition] = []
    changes: list[ChangeSpec] = []
    cite: list[str] = Field(min_length=1)


class Playbook(_M):
    symptom: str | list[str]
    when: list[Condition] = []
    cleanup: bool = False           # environment hygiene: its steps come after every root-cause step
    steps: list[StepSpec] = Field(min_length=1)


Severity = Literal["critical", "error", "warning"]


class TeamSymptom(_M):
    """A symptom a team declares for its own rules: it takes part in root-cause ordering by `rank` (the built-in
    ones run from 0, hardware, to 14; a lower rank is more likely to be what started a failure)."""
    id: str = Field(pattern=r"^[a-z][a-z0-9_]{2,47}$")
    title: str = Field(min_length=3, max_length=120)
    title_ko: str | None = None
    severity: Severity = "error"
    rank: int = Field(default=20, ge=0, le=98)


class TeamRule(_M):
    """A detection rule: a regular expression over one log line; its named groups become the finding's facts and
    may be used in `title` as {name}. `literal` is fixed text every matching line holds (the scanner looks for it);
    by default the longest fixed run of 3+ characters in the pattern."""
    id: str = Field(pattern=r"^[A-Za-z0-9_.-]{3,80}$")
    symptom: str
    pattern: str = Field(min_length=3)
    literal: str | None = Field(default=None, min_length=3)
    severity: Severity | None = None
    title: str = Field(min_length=3, max_length=300)
    confidence: float = Field(default=0.8, gt=0, le=1)


class PlaybookFile(_M):
    playbooks: list[Playbook] = []
    symptoms: list[TeamSymptom] = []
    rules: list[TeamRule] = []

    @model_validator(mode="after")
    def _not_empty(self):
        if not (self.playbooks or self.rules or self.symptoms):
            raise ValueError("a playbook file holds playbooks, rules or symptoms (all are empty)")
        return self
