"""`triage serve`: the Slack bot (Socket Mode or HTTP), its outbox, the work a killed process left, and the weekly
report on its cron schedule. The bot itself is built by bot.wiring (the CLI never imports bot.slack)."""
from __future__ import annotations

import sys

from bot.settings import Settings
from bot.wiring import store as _store


def cmd_serve(args, settings: Settings) -> int:
    from bot.wiring import slack_app, slack_serve, triage as make_triage
    from slack_sdk.errors import SlackApiError, SlackClientError
    _logging()
    mode = settings.require_slack()
    store = _store(settings, write=True)
    store.verify()
    triage = make_triage(settings, store)
    try:
        app = slack_app(settings, triage)
    except (SlackApiError, SlackClientError, OSError) as e:
        print(f"triage: cannot reach Slack with SLACK_BOT_TOKEN ({type(e).__name__}: {str(e)[:200]})", file=sys.stderr)
        return 2
    if app.triage_bot.outbox is not None:
        app.triage_bot.outbox.start(app.client)
    app.triage_bot.resume()   # work a killed process left unfinished (bot.store.journal)
    if settings.report_channel:
        _schedule_reports(settings, triage, app)
    slack_serve(app, settings, mode, args.host, args.port)
    return 0


def _schedule_reports(settings: Settings, triage, app) -> None:
    from datetime import datetime, timezone

    from bot import report
    from bot.proactive.schedule import Cron, Scheduler

    def job():
        report.post(app.client, settings.report_channel, report.last_week(triage.store))

    Scheduler(Cron(settings.report_cron, settings.tz), job, datetime.now(timezone.utc)).start(
        lambda: datetime.now(timezone.utc))


def _logging() -> None:
    import logging
    from core.redact import mask_secrets

    class Mask(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            record.msg, record.args = mask_secrets(record.getMessage()), ()
            return True

    handler = logging.StreamHandler()
    handler.addFilter(Mask())
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])


def add_parser(sub) -> None:
    s = sub.add_parser("serve", help="run the Slack bot (Socket Mode if SLACK_APP_TOKEN is set, else HTTP)",
                       description="Run the Slack bot. Needs SLACK_BOT_TOKEN, and SLACK_APP_TOKEN (Socket Mode) or "
                                   "SLACK_SIGNING_SECRET (HTTP mode); see the README's settings table.")
    s.add_argument("--port", type=int, default=3000,
                   help="HTTP mode: the port for /slack/events and /healthz (default 3000; ignored in Socket Mode)")
    s.add_argument("--host", default="0.0.0.0",
                   help="HTTP mode: the address to listen on (default 0.0.0.0; ignored in Socket Mode)")
    s.set_defaults(func=cmd_serve)
