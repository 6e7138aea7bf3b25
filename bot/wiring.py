"""The engine and the store as every command builds them from Settings (shared by the CLI's subcommands)."""
from __future__ import annotations

import functools


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


def slack_client(settings):
    """The Web API client with the bot token (and SLACK_API_BASE_URL when set: a local fake Slack in tests). Every
    call it makes passes through bot.answer.mrkdwn's pass over text (no live mention or link from a log or a model)."""
    from bot.answer.mrkdwn import runbook_links
    token = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else None
    kwargs = {"base_url": settings.slack_api_base_url} if settings.slack_api_base_url else {}
    return safe_client_class()(token=token, links=runbook_links(settings.runbook_url), **kwargs)


@functools.lru_cache(maxsize=None)
def safe_client_class():
    from slack_sdk import WebClient

    from bot.answer.mrkdwn import defuse_payload

    from bot.slack import post_once

    class SafeWebClient(WebClient):
        """A WebClient whose every call has its text fields defused (bot.answer.mrkdwn) just before it is sent, and whose
        chat.postMessage is posted once however its reply is lost (bot.slack.post_once)."""

        def __init__(self, *args, links: tuple[str, ...] = (), **kwargs):
            super().__init__(*args, **kwargs)
            self.links = links
            self.retry_handlers = [post_once.NoRepost(h) for h in self.retry_handlers]

        def api_call(self, api_method, *, http_verb="POST", files=None, data=None, params=None, json=None,
                     headers=None, auth=None):
            data, params, json = (defuse_payload(x, self.links) if x else x for x in (data, params, json))

            def send(body):
                return super(SafeWebClient, self).api_call(api_method, http_verb=http_verb, files=files, data=data,
                                                           params=params, json=body, headers=headers, auth=auth)
            if api_method == post_once.POST and isinstance(json, dict) and json.get("channel"):
                return post_once.post(self, send, post_once.mark(json))
            return send(json)
    return SafeWebClient
