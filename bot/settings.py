"""One pydantic Settings object, built from the environment and passed explicitly to whatever needs it."""
from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

ENV = {
    "TRIAGE_DB": "db", "TRIAGE_MAX_BYTES": "max_bytes", "TRIAGE_PLAYBOOKS": "playbooks",
    "TRIAGE_ALLOWED_CHANNELS": "allowed_channels", "TRIAGE_RUNBOOK_URL": "runbook_url",
    "TRIAGE_MAX_FILE_BYTES": "max_file_bytes", "SLACK_BOT_TOKEN": "slack_bot_token",
    "SLACK_SIGNING_SECRET": "slack_signing_secret", "SLACK_APP_TOKEN": "slack_app_token",
    "SLACK_API_BASE_URL": "slack_api_base_url", "TRIAGE_LLM": "llm", "TRIAGE_LLM_BASE_URL": "llm_base_url",
    "TRIAGE_LLM_API_KEY": "llm_api_key", "TRIAGE_LLM_TIMEOUT": "llm_timeout",
    "TRIAGE_RATE_LIMIT": "rate_limit", "TRIAGE_REPORT_CRON": "report_cron", "TRIAGE_TZ": "tz", "TRIAGE_REPORT_CHANNEL": "report_channel",
}
FIELD_TO_ENV = {v: k for k, v in ENV.items()}


class SettingsError(Exception):
    pass


class StoreError(SettingsError):
    """TRIAGE_DB cannot be opened or written."""


def _default_db() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(base) / "train-triage" / "triage.db"


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    db: Path = Field(default_factory=_default_db)
    playbooks: list[str] = []
    max_bytes: int = Field(default=4 << 30, gt=0)
    max_file_bytes: int = Field(default=512 << 20, gt=0)
    allowed_channels: list[str] = []
    runbook_url: str | None = None
    slack_bot_token: SecretStr | None = None
    slack_signing_secret: SecretStr | None = None
    slack_app_token: SecretStr | None = None
    slack_api_base_url: str | None = None
    llm: str | None = None
    llm_base_url: str | None = None
    llm_api_key: SecretStr | None = None
    llm_timeout: float = Field(default=20.0, gt=0, le=600)
    rate_limit: str = Field(default="20/60", pattern=r"^\d+/\d+$")
    report_cron: str = "0 9 * * 1"
    tz: str = "UTC"
    report_channel: str | None = None

    @field_validator("report_cron", "tz")
    @classmethod
    def _schedule(cls, v: str, info):
        from bot.report.schedule import Cron
        if info.field_name == "report_cron":
            Cron(v)
        else:
            Cron("0 9 * * 1", v)
        return v

    @field_validator("llm")
    @classmethod
    def _llm(cls, v: str | None):
        if v is not None:
            from bot.llm import LLMConfig
            LLMConfig.parse(v, None, None, 1.0)
        return v

    @field_validator("slack_bot_token", "slack_app_token")
    @classmethod
    def _token(cls, v: SecretStr | None, info):
        kind, prefix = {"slack_bot_token": ("a bot token", "xoxb-"),
                        "slack_app_token": ("an app-level token", "xapp-")}[info.field_name]
        if v is not None and not v.get_secret_value().startswith(prefix):
            raise ValueError(f"must be {kind} starting with {prefix}")
        return v

    @field_validator("slack_api_base_url", "runbook_url", "llm_base_url")
    @classmethod
    def _url(cls, v: str | None):
        if v is not None and not v.startswith(("http://", "https://")):
            raise ValueError("must be an http(s) URL")
        if v is not None and not v.endswith("/"):
            v += "/"
        return v

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Settings":
        env = dict(os.environ if env is None else env)
        raw: dict[str, object] = {}
        for var, name in ENV.items():
            val = env.get(var, "").strip()
            if not val:
                continue
            if name == "playbooks":
                raw[name] = [p for p in val.split(os.pathsep) if p]
            elif name == "allowed_channels":
                raw[name] = [c.strip() for c in val.replace(" ", ",").split(",") if c.strip()]
            else:
                raw[name] = val
        try:
            return cls.model_validate(raw)
        except ValidationError as e:
            err = e.errors()[0]
            raise SettingsError(f"{FIELD_TO_ENV.get(str(err['loc'][0]), err['loc'][0])}: {err['msg']}") from None

    def llm_config(self):
        """The LLM to phrase answers with, or None when TRIAGE_LLM is unset."""
        if not self.llm:
            return None
        from bot.llm import LLMConfig
        key = self.llm_api_key.get_secret_value() if self.llm_api_key else None
        return LLMConfig.parse(self.llm, self.llm_base_url, key, self.llm_timeout)

    def require_slack(self) -> str:
        """Check what `triage serve` needs; return the mode ('socket' or 'http')."""
        if self.slack_bot_token is None:
            raise SettingsError("SLACK_BOT_TOKEN: not set (the bot token, xoxb-…, from your Slack app)")
        if self.slack_app_token is not None:
            return "socket"
        if self.slack_signing_secret is None:
            raise SettingsError("SLACK_SIGNING_SECRET: not set (needed in HTTP mode; set SLACK_APP_TOKEN for "
                                "Socket Mode instead)")
        return "http"
