"""`triage serve` as a user starts it: settings errors, and a real process answering a signed slash command."""
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from conftest import FIXTURES, ROOT, SECRET


def _serve(env, port):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "TRIAGE_"))}
    e.update(env)
    return subprocess.Popen([sys.executable, "-m", "bot.cli", "serve", "--host", "127.0.0.1", "--port", str(port)],
                            cwd=ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.parametrize("env,var", [
    ({}, "SLACK_BOT_TOKEN"),
    ({"SLACK_BOT_TOKEN": "not-a-token", "SLACK_SIGNING_SECRET": "s"}, "SLACK_BOT_TOKEN"),
    ({"SLACK_BOT_TOKEN": "xoxb-1"}, "SLACK_SIGNING_SECRET"),
    ({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xoxb-wrong"}, "SLACK_APP_TOKEN"),
    ({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s", "SLACK_API_BASE_URL": "ftp://x"}, "SLACK_API_BASE_URL"),
    ({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s", "TRIAGE_MAX_BYTES": "lots"}, "TRIAGE_MAX_BYTES"),
    ({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s", "TRIAGE_TZ": "America"}, "TRIAGE_TZ"),
    ({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s", "TRIAGE_LLM_TIMEOUT": "0"}, "TRIAGE_LLM_TIMEOUT"),
    ({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s", "TRIAGE_LLM": "gpt-4o"}, "TRIAGE_LLM"),
])
def test_missing_or_malformed_settings_exit_2_naming_the_variable(env, var):
    p = _serve(env, 1)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 2
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and var in lines[0] and "Traceback" not in err.decode()


def test_unwritable_database_is_reported_clearly(tmp_path):
    (tmp_path / "f").write_text("x")
    p = _serve({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "s", "TRIAGE_DB": str(tmp_path / "f" / "t.db")}, 1)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 2 and "TRIAGE_DB" in err.decode() and "Traceback" not in err.decode()


def test_serve_process_answers_a_slash_command_end_to_end(tmp_path):
    from testkit.fakeslack import FakeSlack, post_signed, slash_body
    fake = FakeSlack().start()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = _serve({"SLACK_BOT_TOKEN": "xoxb-e2e", "SLACK_SIGNING_SECRET": SECRET, "SLACK_API_BASE_URL": fake.api,
                "TRIAGE_DB": str(tmp_path / "t.db"), "TRIAGE_LOSS_SPIKE": "rel=0.3"}, port)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert p.poll() is None, p.stderr.read().decode()
                assert time.monotonic() < deadline
                time.sleep(0.1)
        text = (FIXTURES / "gpu_xid" / "xid79.log").read_text()
        status, _, _ = post_signed(f"http://127.0.0.1:{port}/slack/events", SECRET,
                                   slash_body(text, fake.response_url()), "application/x-www-form-urlencoded")
        assert status == 200
        resp = fake.wait(lambda: fake.responses)[0]
        assert "Root cause: gpu_xid" in resp["blocks"][0]["text"]["text"]
        assert fake.called("auth.test")
        # the team's own loss-spike threshold from the environment reaches the bot's diagnoses
        from test_cli_diagnose import _mild_spike_log
        post_signed(f"http://127.0.0.1:{port}/slack/events", SECRET,
                    slash_body(_mild_spike_log().decode(), fake.response_url(1)), "application/x-www-form-urlencoded")
        resp = fake.wait(lambda: len(fake.responses) > 1 and fake.responses)[1]
        assert "loss_spike" in resp["blocks"][0]["text"]["text"]
    finally:
        p.terminate()
        p.wait(timeout=30)
        fake.stop()
    assert (tmp_path / "t.db").exists()
    logs = p.stderr.read().decode()
    assert "xoxb-e2e" not in logs and "will be unused" not in logs   # no Bolt warning at start-up


def test_socket_mode_is_chosen_when_app_token_is_set():
    from bot.settings import Settings
    s = Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_APP_TOKEN": "xapp-1-abc"})
    assert s.require_slack() == "socket"
    s = Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-1", "SLACK_SIGNING_SECRET": "x"})
    assert s.require_slack() == "http"
    assert "xoxb-1" not in repr(s)


def test_socket_mode_end_to_end_over_a_local_websocket(tmp_path, engine):
    import json as _json
    import time as _time

    from slack_bolt.adapter.socket_mode import SocketModeHandler

    from bot.service import Triage
    from bot.settings import Settings
    from bot.slack.app import create_app
    from bot.store.store import Store
    from testkit.fakeslack import FakeSlack
    from testkit.fakesocket import FakeSocketMode
    from knowledge.runbook import load as load_runbook
    fake, ws = FakeSlack().start(), FakeSocketMode()
    fake.socket_url = ws.url
    settings = Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-sock", "SLACK_APP_TOKEN": "xapp-1-sock",
                                  "SLACK_API_BASE_URL": fake.api, "TRIAGE_DB": str(tmp_path / "s.db")})
    assert settings.require_slack() == "socket"
    app = create_app(settings, Triage(engine, load_runbook(), Store(settings.db)))
    handler = SocketModeHandler(app, settings.slack_app_token.get_secret_value())
    try:
        handler.connect()
        assert ws.connected.wait(15)
        text = (FIXTURES / "gpu_xid" / "xid79.log").read_text()
        payload = {"token": "x", "team_id": "T1", "channel_id": "C1", "user_id": "U1", "command": "/diagnose",
                   "text": text, "response_url": fake.response_url(), "trigger_id": f"{_time.time_ns()}"}
        ws.send({"envelope_id": "env-1", "type": "slash_commands", "accepts_response_payload": True,
                 "payload": payload})
        ack = ws.wait_ack("env-1")
        assert "Diagnosing" in _json.dumps(ack)
        resp = fake.wait(lambda: fake.responses)[0]
        assert "Root cause: gpu_xid" in resp["blocks"][0]["text"]["text"]
        assert fake.called("apps.connections.open")
    finally:
        handler.close()
        ws.close()
        fake.stop()


def test_both_manifests_declare_the_same_app_and_the_http_one_has_every_request_url():
    import yaml
    sock = yaml.safe_load((ROOT / "slack-manifest.yaml").read_text())
    http = yaml.safe_load((ROOT / "slack-manifest-http.yaml").read_text())
    assert sock["oauth_config"] == http["oauth_config"] and sock["features"]["shortcuts"] == http["features"]["shortcuts"]
    assert sock["settings"]["socket_mode_enabled"] is True and http["settings"]["socket_mode_enabled"] is False
    urls = [http["features"]["slash_commands"][0]["url"], http["settings"]["event_subscriptions"]["request_url"],
            http["settings"]["interactivity"]["request_url"]]
    assert all(u.endswith("/slack/events") and u.startswith("https://") for u in urls)
    assert {"channels:read", "groups:read"} <= set(http["oauth_config"]["scopes"]["bot"])


def test_the_dockerfile_installs_dependencies_before_the_source_and_ships_every_package():
    """No Docker engine here to build it; the layer order and the packages it copies are checked as text."""
    import tomllib
    lines = (ROOT / "Dockerfile").read_text().splitlines()
    deps = next(i for i, ln in enumerate(lines) if "pip install" in ln and "requirements.txt" in ln)
    first_source = next(i for i, ln in enumerate(lines) if ln.startswith("COPY bot"))
    assert deps < first_source and any("optional-dependencies']['fast']" in ln for ln in lines)
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    copied = {ln.split()[1] for ln in lines if ln.startswith("COPY ") and "pyproject" not in ln}
    assert {p.split(".")[0] for p in packages} <= copied
