"""One Settings object, built from the environment and passed explicitly to whatever needs it.

A frozen standard-library dataclass checked field by field in `from_env` (not a pydantic model: every `triage`
command builds it, and pydantic's model machinery alone costs more start-up than the whole 50-line diagnosis —
issue 6). Secrets are `Secret`s whose repr never shows the value. A bad value raises SettingsError naming the
environment variable, which the CLI prints as one line with exit code 2."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

PROVIDERS = {"openai": "openai", "anthropic": "anthropic", "bedrock": "bedrock_converse",
             "bedrock_converse": "bedrock_converse", "ollama": "openai", "vllm": "openai"}


class SettingsError(Exception):
    pass


class Secret:
    """A token or key: `get_secret_value()` gives it; repr/str never do (safe in logs and tracebacks)."""
    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('**********')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)


@dataclass(frozen=True)
class LLMConfig:
    provider: str
    model: str
    base_url: str | None = None
    api_key: Secret | None = None
    timeout: float = 20.0
    max_tokens: int = 900   # a bound on every reply: a local server's default is "until the context is full"

    @property
    def label(self) -> str:
        return f"{self.provider}:{self.model}"

    @classmethod
    def parse(cls, spec: str, base_url: str | None, api_key: str | None, timeout: float) -> "LLMConfig":
        provider, sep, model = spec.partition(":")
        if not sep or not model or provider not in PROVIDERS:
            raise ValueError(f"must look like provider:model with provider one of {', '.join(sorted(PROVIDERS))}")
        return cls(provider, model, base_url, Secret(api_key) if api_key else None, timeout)


def _default_db() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return Path(base) / "train-triage" / "triage.db"


def _default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(base) / "train-triage"


# --- one parser per kind of value; each raises ValueError with the message shown after the variable name ---

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}


def _byte_size(v: str) -> int:
    """A size in bytes: a whole number (4_000_000), or a number with a unit, case-insensitive: KB, MB, GB (powers of
    1000) or KiB, MiB, GiB (powers of 1024), e.g. 10MB, 1.5GiB, 512 kib."""
    m = re.fullmatch(r"\s*(\d[\d_]*(?:\.\d+)?)\s*([a-zA-Z]*)\s*", v)
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS or ("." in m.group(1) and not unit.strip("b")):
        raise ValueError(f"must be a size in bytes: a whole number, or a number with KB, MB, GB, KiB, MiB or GiB "
                         f"(e.g. 10MB), not {v!r}")
    n = int(float(m.group(1).replace("_", "")) * _UNITS[unit])
    if n <= 0:
        raise ValueError("must be greater than 0")
    return n


def _seconds(v: str) -> float:
    try:
        n = float(v)
    except ValueError:
        raise ValueError(f"must be a number of seconds, not {v!r}") from None
    if not 0 < n <= 600:
        raise ValueError("must be more than 0 and at most 600 seconds")
    return n


def _url(v: str) -> str:
    if not v.startswith(("http://", "https://")):
        raise ValueError("must be an http(s) URL")
    return v if v.endswith("/") else v + "/"


def _token(prefix: str, kind: str) -> Callable[[str], Secret]:
    def parse(v: str) -> Secret:
        if not v.startswith(prefix):
            raise ValueError(f"must be {kind} starting with {prefix}")
        return Secret(v)
    return parse


def _rate(v: str) -> str:
    if not re.fullmatch(r"\d+/\d+", v):
        raise ValueError("must look like COUNT/SECONDS, e.g. 20/60")
    count, seconds = (int(x) for x in v.split("/"))
    if count < 1 or seconds < 1:
        raise ValueError("COUNT and SECONDS must both be at least 1 (0 would refuse everyone)")
    return v


def _cron(v: str) -> str:
    from bot.proactive.schedule import Cron
    Cron(v)
    return v


def _tz(v: str) -> str:
    from bot.proactive.schedule import Cron
    Cron("0 9 * * 1", v)
    return v


def _llm(v: str) -> str:
    LLMConfig.parse(v, None, None, 1.0)
    return v


def _loss_spike(v: str):
    """"rel=0.3,mad_k=4": the options the loss parser declares (LossParser.Options, a SpikeThresholds), as the engine
    exposes them (engine.options: bot/ never imports parsers/)."""
    from engine.options import LOSS_OPTIONS, parse_options
    return parse_options(LOSS_OPTIONS, v)


def _scan_backend(v: str) -> str:
    from importlib.util import find_spec

    from engine.options import BACKENDS
    if v not in BACKENDS:
        raise ValueError(f"must be one of {', '.join(BACKENDS)}, not {v!r}")
    if v in ("hyperscan", "ahocorasick") and find_spec(v) is None:
        package = "hyperscan" if v == "hyperscan" else "pyahocorasick"
        raise ValueError(f"{package} is not installed (pip install {package}), use auto or re")
    return v


def _paths(v: str) -> list[str]:
    return [p for p in v.split(os.pathsep) if p]


def _channels(v: str) -> list[str]:
    return [c.strip() for c in v.replace(" ", ",").split(",") if c.strip()]


# environment variable -> (field, parser)
ENV: dict[str, tuple[str, Callable[[str], Any]]] = {
    "TRIAGE_DB": ("db", Path), "TRIAGE_CACHE_DIR": ("cache_dir", Path), "TRIAGE_MAX_BYTES": ("max_bytes", _byte_size),
    "TRIAGE_PLAYBOOKS": ("playbooks", _paths), "TRIAGE_ALLOWED_CHANNELS": ("allowed_channels", _channels),
    "TRIAGE_RUNBOOK_URL": ("runbook_url", _url), "TRIAGE_MAX_FILE_BYTES": ("max_file_bytes", _byte_size),
    "TRIAGE_MAX_THREAD_BYTES": ("max_thread_bytes", _byte_size),
    "SLACK_BOT_TOKEN": ("slack_bot_token", _token("xoxb-", "a bot token")),
    "SLACK_SIGNING_SECRET": ("slack_signing_secret", Secret),
    "SLACK_APP_TOKEN": ("slack_app_token", _token("xapp-", "an app-level token")),
    "SLACK_API_BASE_URL": ("slack_api_base_url", _url), "TRIAGE_LLM": ("llm", _llm),
    "TRIAGE_LLM_BASE_URL": ("llm_base_url", _url), "TRIAGE_LLM_API_KEY": ("llm_api_key", Secret),
    "TRIAGE_LLM_TIMEOUT": ("llm_timeout", _seconds), "TRIAGE_RATE_LIMIT": ("rate_limit", _rate),
    "TRIAGE_LOSS_SPIKE": ("loss_spike", _loss_spike), "TRIAGE_REPORT_CRON": ("report_cron", _cron),
    "TRIAGE_TZ": ("tz", _tz), "TRIAGE_REPORT_CHANNEL": ("report_channel", str),
    "TRIAGE_SCAN_BACKEND": ("scan_backend", _scan_backend),
}


@dataclass(frozen=True)
class Settings:
    db: Path = field(default_factory=_default_db)
    cache_dir: Path = field(default_factory=_default_cache)   # validated playbooks, keyed by content hash
    playbooks: list[str] = field(default_factory=list)
    max_bytes: int = 4 << 30
    max_file_bytes: int = 512 << 20
    max_thread_bytes: int = 1 << 30   # all the files of one thread, downloaded to disk one at a time
    allowed_channels: list[str] = field(default_factory=list)
    runbook_url: str | None = None
    slack_bot_token: Secret | None = None
    slack_signing_secret: Secret | None = None
    slack_app_token: Secret | None = None
    slack_api_base_url: str | None = None
    llm: str | None = None
    llm_base_url: str | None = None
    llm_api_key: Secret | None = None
    llm_timeout: float = 20.0
    rate_limit: str = "20/60"
    loss_spike: Any = None    # parsers.convergence.SpikeThresholds when TRIAGE_LOSS_SPIKE is set
    scan_backend: str = "auto"
    report_cron: str = "0 9 * * 1"
    tz: str = "UTC"
    report_channel: str | None = None

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> "Settings":
        env = dict(os.environ if env is None else env)
        values: dict[str, Any] = {}
        for var, (name, parse) in ENV.items():
            raw = env.get(var, "").strip()
            if not raw:
                continue
            try:
                values[name] = parse(raw)
            except ValueError as e:
                raise SettingsError(f"{var}: {e}") from None
        return cls(**values)

    def parser_options(self) -> tuple[Any, ...]:
        """The parsers' options the team set (instances of the types the parsers declare), for engine.Engine."""
        return (self.loss_spike,) if self.loss_spike is not None else ()

    def llm_config(self) -> LLMConfig | None:
        """The LLM to phrase answers with, or None when TRIAGE_LLM is unset."""
        if not self.llm:
            return None
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
