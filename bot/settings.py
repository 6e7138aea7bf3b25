"""One pydantic Settings object, built from the environment and passed explicitly to whatever needs it."""
from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError


class SettingsError(Exception):
    pass


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    db: Path = Field(default_factory=lambda: Path(os.path.expanduser("~/.local/share/train-triage/triage.db")))
    playbooks: list[str] = []
    max_bytes: int = Field(default=4 << 30, gt=0)

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Settings":
        env = dict(os.environ if env is None else env)
        raw: dict[str, object] = {}
        names = {"TRIAGE_DB": "db", "TRIAGE_MAX_BYTES": "max_bytes"}
        for var, field in names.items():
            if env.get(var):
                raw[field] = env[var]
        if env.get("TRIAGE_PLAYBOOKS"):
            raw["playbooks"] = [p for p in env["TRIAGE_PLAYBOOKS"].split(os.pathsep) if p]
        try:
            return cls.model_validate(raw)
        except ValidationError as e:
            err = e.errors()[0]
            field = str(err["loc"][0])
            var = next((v for v, f in names.items() if f == field), "TRIAGE_PLAYBOOKS")
            raise SettingsError(f"{var}: {err['msg']}") from None
