"""The typed contract every layer shares: parsers emit Findings, playbooks attach Steps, bot renders a Diagnosis."""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

SCHEMA = "triage.diagnosis/v1"

SYMPTOMS = (
    "cuda_oom", "nccl_timeout", "nccl_error", "efa_mr_registration", "tcp_fallback", "efa_provider_missing",
    "fork_enomem", "loss_spike", "loss_nan", "gpu_xid", "nvlink_inactive", "version_mismatch", "moe_imbalance",
)

Severity = Literal["critical", "error", "warning"]
Owner = Literal["ml", "infra"]
ChangeKind = Literal["env", "flag", "config", "command"]
Scalar = str | int | float | bool | None


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Evidence(_Model):
    line: int
    text: str


class Change(_Model):
    kind: ChangeKind
    name: str
    to: Scalar = None
    from_: Scalar = Field(default=None, alias="from")
    note: str | None = None

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Step(_Model):
    id: str
    owner: Owner
    text: str
    changes: list[Change] = []
    cite: list[str] = []


class Finding(_Model):
    symptom: str
    rule: str
    title: str
    severity: Severity
    confidence: float
    evidence: list[Evidence] = []
    facts: dict[str, Any] = {}
    caused_by: str | None = None
    steps: list[Step] = []
    first_line: int = 0  # where the failure first shows; used to order root causes in time


class InputInfo(_Model):
    name: str
    bytes: int
    lines: int
    truncated: bool = False
    notes: list[str] = []   # what was skipped or capped, in words


class Diagnosis(_Model):
    schema_: str = Field(default=SCHEMA, alias="schema")
    input: InputInfo
    versions: dict[str, str | None] = {}
    job: dict[str, Any] = {}
    findings: list[Finding] = []
    benchmarks: list[dict[str, Any]] = []   # parsed nccl-tests tables
    unclaimed: list[dict[str, Any]] = []    # error-looking line templates no parser explained

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    def to_json_dict(self) -> dict[str, Any]:
        data = self.model_dump(by_alias=True, exclude_none=False)
        for f in data["findings"]:
            f.pop("first_line", None)
            if f.get("caused_by") is None:
                f.pop("caused_by", None)
            for step in f["steps"]:
                for ch in step["changes"]:
                    if ch.get("from") is None:
                        ch.pop("from", None)
                    if ch.get("note") is None:
                        ch.pop("note", None)
        return data
