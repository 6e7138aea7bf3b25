"""Settings from the environment: parsed values, one-line errors naming the variable, secrets never printed."""
import os

import pytest

from bot.settings import Settings, SettingsError


def test_values_are_parsed_as_documented(tmp_path):
    s = Settings.from_env({"TRIAGE_PLAYBOOKS": f"{tmp_path}/a{os.pathsep}{tmp_path}/b",
                           "TRIAGE_ALLOWED_CHANNELS": "C1, C2,,C3", "SLACK_API_BASE_URL": "http://127.0.0.1:9/api",
                           "TRIAGE_MAX_BYTES": "1_000_000", "TRIAGE_LLM_TIMEOUT": "2.5",
                           "TRIAGE_CACHE_DIR": str(tmp_path / "c"), "TRIAGE_LLM": "openai:gpt-4o-mini"})
    assert s.playbooks == [f"{tmp_path}/a", f"{tmp_path}/b"]
    assert s.allowed_channels == ["C1", "C2", "C3"]
    assert s.slack_api_base_url == "http://127.0.0.1:9/api/"
    assert (s.max_bytes, s.llm_timeout, s.cache_dir) == (1_000_000, 2.5, tmp_path / "c")
    assert s.llm_config().label == "openai:gpt-4o-mini"


def test_defaults_follow_xdg_directories(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    s = Settings.from_env({})
    assert s.cache_dir == tmp_path / "cache" / "train-triage"
    assert s.db == tmp_path / "data" / "train-triage" / "triage.db"
    assert s.llm_config() is None and s.rate_limit == "20/60"


@pytest.mark.parametrize("var,value", [
    ("TRIAGE_MAX_BYTES", "0"), ("TRIAGE_MAX_BYTES", "4XB"), ("TRIAGE_MAX_FILE_BYTES", "-1"),
    ("TRIAGE_LLM_TIMEOUT", "601"), ("TRIAGE_LLM_TIMEOUT", "soon"), ("TRIAGE_RATE_LIMIT", "20 per minute"),
    ("TRIAGE_REPORT_CRON", "0 9 * *"), ("TRIAGE_TZ", "Mars/Olympus"), ("TRIAGE_RUNBOOK_URL", "wiki/runbook"),
    ("SLACK_APP_TOKEN", "xoxb-not-an-app-token"), ("TRIAGE_LLM", "openai"), ("TRIAGE_SCAN_BACKEND", "hyperscn"),
    ("TRIAGE_LOSS_SPIKE", "rel=0"),
])
def test_a_bad_value_names_its_variable(var, value):
    with pytest.raises(SettingsError) as e:
        Settings.from_env({var: value})
    assert str(e.value).startswith(f"{var}: ") and "\n" not in str(e.value)


def test_secrets_never_show_in_repr_or_str():
    secrets = {"SLACK_BOT_TOKEN": "xoxb-123-secretvalue", "SLACK_SIGNING_SECRET": "signsecret42",
               "SLACK_APP_TOKEN": "xapp-1-appsecret", "TRIAGE_LLM_API_KEY": "sk-llmsecret", "TRIAGE_LLM": "openai:m"}
    s = Settings.from_env(secrets)
    shown = repr(s) + str(s) + repr(s.llm_config())
    for v in ("secretvalue", "signsecret42", "appsecret", "llmsecret"):
        assert v not in shown
    assert s.slack_bot_token.get_secret_value() == "xoxb-123-secretvalue"
    assert s.llm_config().api_key.get_secret_value() == "sk-llmsecret"


def test_parser_options_are_the_parsers_own_types_and_reach_the_engine():
    from parsers.convergence import LossParser, SpikeThresholds
    s = Settings.from_env({"TRIAGE_LOSS_SPIKE": "rel=0.3, window=10", "TRIAGE_SCAN_BACKEND": "re"})
    assert s.parser_options() == (SpikeThresholds(rel=0.3, window=10),) and s.scan_backend == "re"
    assert LossParser.Options is SpikeThresholds and Settings.from_env({}).parser_options() == ()
    from engine import Engine
    readers = Engine([], s.parser_options())._readers()
    loss = next(r for r in readers if isinstance(r, LossParser))
    assert loss.spike.rel == 0.3 and loss.spike.window == 10 and loss.spike.mad_k == 6.0


@pytest.mark.parametrize("backend,package", [("hyperscan", "hyperscan"), ("ahocorasick", "pyahocorasick")])
def test_a_scanner_backend_that_is_not_installed_is_one_line_naming_its_package(monkeypatch, backend, package):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == backend else real(name, *a))
    with pytest.raises(SettingsError) as e:
        Settings.from_env({"TRIAGE_SCAN_BACKEND": backend})
    assert str(e.value) == (f"TRIAGE_SCAN_BACKEND: {package} is not installed (pip install {package}), use auto or re")
