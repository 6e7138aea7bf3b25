"""The engine and the store as every command builds them from Settings (shared by the CLI's subcommands)."""
from __future__ import annotations


def engine(settings):
    """The diagnosis engine with the built-in playbooks plus TRIAGE_PLAYBOOKS (every file checked at load: a bad
    symptom, path or citation fails here) and the team's parser options and scanner backend."""
    from engine import Engine
    from playbooks.engine import load
    books = load(settings.playbooks, cache=settings.cache_dir / "playbooks")
    return Engine(books, settings.parser_options(), settings.scan_backend, settings.cache_dir / "scanner")


def recognised(engine, line: str) -> str | None:
    """The symptom today's engine finds in this one line alone, or None: an 'unrecognised' line recorded before a
    parser or rule learnt it is not unrecognised any more."""
    from core.ingest import from_bytes
    try:
        d = engine.diagnose(from_bytes(line.encode("utf-8", "replace") + b"\n", "line"))
    except Exception:   # (an unusable line: nothing claims it)
        return None
    return d.findings[0].symptom if d.findings else None


def builtin_engine():
    """The engine with the built-in playbooks and readers only (no settings needed)."""
    from engine import Engine
    from playbooks.engine import load
    return Engine(load())


def store(settings):
    from bot.store import Store
    return Store(settings.db)


def triage(settings, store):
    """What the Slack bot and `triage notify` answer with: the engine, the runbook (read once), the store, and the
    LLM phraser when TRIAGE_LLM is set."""
    from bot.service import Triage
    from knowledge.runbook import load as load_runbook
    runbook, cfg = load_runbook(), settings.llm_config()
    phraser = None
    if cfg is not None:
        from bot.llm import Phraser
        phraser = Phraser(cfg, runbook, store)
    return Triage(engine(settings), runbook, store, settings.max_bytes, phraser)


def slack_client(settings):
    """The Web API client with the bot token (and SLACK_API_BASE_URL when set: a local fake Slack in tests)."""
    from slack_sdk import WebClient
    token = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else None
    kwargs = {"base_url": settings.slack_api_base_url} if settings.slack_api_base_url else {}
    return WebClient(token=token, **kwargs)
