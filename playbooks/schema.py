"""The playbook file format, validated with pydantic (`extra="forbid"`): a typo in a playbook fails at start-up."""
from __future__ import annotations

from typing import Literal, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator

from playbooks.check import COMPUTE_OPS

Scalar = Union[str, int, float, bool]
Op = Literal["exists", "missing", "eq", "ne", "lt", "le", "gt", "ge", "in", "nin", "contains", "nonempty"]


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


class PlaybookFile(_M):
    playbooks: list[Playbook] = Field(min_length=1)
