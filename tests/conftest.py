import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
sys.path.insert(0, str(ROOT))


def corpus_texts(name: str) -> dict[str, str]:
    """One file of the project's corpus (tests/corpus/<name>.jsonl): case id -> log text."""
    import json
    lines = (ROOT / "tests" / "corpus" / f"{name}.jsonl").read_text(encoding="utf-8").splitlines()
    return {c["id"]: c["text"] for c in map(json.loads, filter(str.strip, lines))}


@pytest.fixture(scope="session")
def books():
    from playbooks.engine import load
    return load()


@pytest.fixture(scope="session")
def engine(books):
    from engine import Engine
    return Engine(books)


@pytest.fixture
def run(engine):
    """Diagnose text (or bytes) with the real engine."""
    from core.ingest import from_bytes

    def _run(text, name="paste"):
        data = text.encode() if isinstance(text, str) else text
        return engine.diagnose(from_bytes(data, name))
    return _run


SECRET = "test-signing-secret"


class SlackHarness:
    def __init__(self, fake, url, store, settings):
        self.fake, self.url, self.store, self.settings = fake, url, store, settings

    def post(self, body, content_type, **kw):
        from testkit.fakeslack import post_signed
        return post_signed(self.url + "/slack/events", SECRET, body, content_type, **kw)

    def slash(self, text, **kw):
        from testkit.fakeslack import slash_body
        return self.post(slash_body(text, self.fake.response_url(), **kw), "application/x-www-form-urlencoded")

    def event(self, event, event_id="Ev1", **kw):
        from testkit.fakeslack import event_body
        return self.post(event_body(event, event_id), "application/json", **kw)

    def interactive(self, payload):
        from testkit.fakeslack import interactive_body
        return self.post(interactive_body(payload), "application/x-www-form-urlencoded")


@pytest.fixture
def slack_bot(tmp_path, engine):
    """Start the real Bolt app behind the real HTTP server, talking to a fake Slack Web API over HTTP."""
    import threading

    from bot.slack.server import make_server
    from bot.service import Triage
    from bot.settings import Settings
    from bot.slack.app import create_app
    from bot.store.store import Store
    from testkit.fakeslack import FakeSlack
    from knowledge.runbook import load as load_runbook

    started = []

    def start(**env):
        fake = FakeSlack().start()
        settings = Settings.from_env({"SLACK_BOT_TOKEN": "xoxb-test-token", "SLACK_SIGNING_SECRET": SECRET,
                                      "SLACK_API_BASE_URL": fake.api, "TRIAGE_DB": str(tmp_path / "t.db"), **env})
        store = Store(settings.db)
        phraser = None
        if settings.llm_config() is not None:
            from bot.answer.llm import Phraser
            phraser = Phraser(settings.llm_config(), load_runbook(), store)
        app = create_app(settings, Triage(engine, load_runbook(), store, phraser=phraser))
        server = make_server(app, "127.0.0.1", 0, SECRET)
        threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()  # fast shutdown
        started.append((fake, server))
        return SlackHarness(fake, f"http://127.0.0.1:{server.server_address[1]}", store, settings)

    yield start
    for fake, server in started:
        server.shutdown()
        server.server_close()
        fake.stop()
