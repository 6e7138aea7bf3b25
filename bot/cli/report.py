"""`triage report`: the weekly tuning report from the stored diagnoses (report.md + PNG charts), optionally posted."""
from __future__ import annotations

import sys

from bot.settings import Settings
from bot.wiring import store as _store


def cmd_report(args, settings: Settings) -> int:
    from datetime import datetime, timezone
    from pathlib import Path

    from bot import report
    from bot.report.data import parse_date, parse_since
    try:
        until = parse_date(args.until) if args.until else datetime.now(timezone.utc)
        since = parse_since(args.since, until)
    except ValueError as e:
        print(f"triage: {e}", file=sys.stderr)
        return 2
    try:
        rep = report.make(_store(settings), since, until, Path(args.out))
    except OSError as e:   # --out names a file, an unwritable place, a full disk
        print(f"triage: --out {args.out}: cannot write the report there ({e.strerror or type(e).__name__})",
              file=sys.stderr)
        return 2
    print(f"wrote {rep.markdown_path} and {len(rep.charts)} chart(s): {rep.data.total} diagnoses")
    if args.post:
        from bot.wiring import slack_client
        settings.require_slack()
        report.post(slack_client(settings), args.post, rep)
        print(f"posted to {args.post}")
    return 0


def add_parser(sub) -> None:
    r = sub.add_parser("report", help="weekly tuning report from the stored diagnoses (report.md + PNG charts)")
    r.add_argument("--since", default="7d", help="7d, 24h, 2w or a date (default 7d)")
    r.add_argument("--until", help="end of the period, a date (default now)")
    r.add_argument("--out", default="triage-report", help="output directory (default ./triage-report)")
    r.add_argument("--post", metavar="CHANNEL", help="also post it to this Slack channel")
    r.set_defaults(func=cmd_report)
