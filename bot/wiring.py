"""The engine and the store as every command builds them from Settings (shared by the CLI's subcommands)."""
from __future__ import annotations


def engine(settings):
    """The diagnosis engine with the built-in playbooks plus TRIAGE_PLAYBOOKS (every file checked at load: a bad
    symptom, path or citation fails here) and the team's parser options and scanner backend."""
    from engine import Engine
    from playbooks.engine import load
    books = load(settings.playbooks, cache=settings.cache_dir / "playbooks")
    return Engine(books, settings.parser_options(), settings.scan_backend)


def store(settings):
    from bot.store import Store
    return Store(settings.db)
