"""`triage db backup PATH`: an online backup of TRIAGE_DB."""
from __future__ import annotations

import sys

from bot.settings import Settings
from bot.wiring import store as _store


def cmd_db_backup(args, settings: Settings) -> int:
    import sqlite3
    store = _store(settings)
    try:
        store.backup(args.path)
    except (sqlite3.Error, OSError) as e:
        print(f"triage: cannot back up to {args.path} ({e}); does its directory exist and is it writable?",
              file=sys.stderr)
        return 2
    print(f"backed up {settings.db} to {args.path}")
    return 0


def add_parser(sub) -> None:
    db = sub.add_parser("db", help="database maintenance")
    dbsub = db.add_subparsers(dest="db_command", required=True)
    b = dbsub.add_parser("backup", help="online backup of TRIAGE_DB to PATH")
    b.add_argument("path")
    b.set_defaults(func=cmd_db_backup)
