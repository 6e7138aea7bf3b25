"""The engine, the store, the Slack client and the Slack bot as every interface builds them from Settings: the glue
at bot/'s top, so that the CLI starts the Slack bot (`triage serve`) without importing bot.slack itself."""
from __future__ import annotations


def engine(settings):
    """The diagnosis engine with the built-in playbooks plus TRIAGE_PLAYBOOKS (every file checked at load: a bad
    symptom, path or citation fails here) and the team's parser options and scanner backend."""
    from engine import Engine
    from playbooks.engine import load
    books = load(settings.playbooks, cache=settings.cache_dir / "playbooks")
    return Engine(books, settings.parser_options(), settings.scan_backend, settings.cache_dir / "scanner")


def store(settings, write: bool = False):
    """The store; with write=True (serve, watch: they must remember what they answered) a database that can only be
    read is refused with one line naming TRIAGE_DB instead of being read only."""
    from bot.store.store import Store, StoreError
    s = Store(settings.db)
    if write and s.readonly:
        raise StoreError(f"TRIAGE_DB {settings.db}: the database cannot be written (read-only file, directory or "
                         "mount); this command must store what it answers")
    return s


def triage(settings, store):
    """What the Slack bot and `triage notify` answer with: the engine, the runbook (read once), the store, and the
    LLM phraser when TRIAGE_LLM is set."""
    from bot.service import Triage
    from knowledge.runbook import load as load_runbook
    runbook, cfg = load_runbook(), settings.llm_config()
    phraser = None
    if cfg is not None:
        from bot.answer.llm import Phraser
        phraser = Phraser(cfg, runbook, store)
    return Triage(engine(settings), runbook, store, settings.max_bytes, phraser)


def slack_app(settings, triage):
    """The Slack bot: a Bolt app with its listeners over `triage` (bot.slack.app); raises slack_sdk's errors when
    Slack cannot be reached with the bot token."""
    from bot.slack.app import create_app
    return create_app(settings, triage)


def slack_serve(app, settings, mode: str, host: str, port: int) -> None:
    """Serve the bot until stopped: Socket Mode ("socket") or HTTP on host:port (bot.slack.server)."""
    from bot.slack.server import serve_http, serve_socket
    if mode == "socket":
        serve_socket(app, settings.slack_app_token.get_secret_value())
    else:
        serve_http(app, host, port, settings.slack_signing_secret.get_secret_value())


def slack_client(settings):
    """The Web API client with the bot token (bot.slack.client: every call defused, every post made once)."""
    from bot.slack.client import slack_client as client
    return client(settings)
