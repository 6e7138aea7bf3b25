"""`triage notify`: diagnose one job's logs and post the answer to a Slack channel (bot.proactive.notify)."""
from __future__ import annotations

import sys

from bot.proactive.notify import Notifier, said, slack_error, slack_ready


def cmd_notify(args, settings) -> int:
    from bot.wiring import store
    from core.ingest import UnusableInput
    from core.inputs import log_paths
    why = slack_ready(settings)
    if why:
        print(f"triage: {why}", file=sys.stderr)
        return 2
    paths, notes = log_paths(args.files)
    for note in notes:
        print(f"triage: {note}", file=sys.stderr)
    notifier = Notifier(settings, store(settings), args.channel, args.lang)
    try:
        out = notifier.job(paths, args.notify_job or "", args.exit_code, args.only_failures)
    except UnusableInput as e:
        print(f"triage: {e}", file=sys.stderr)
        return 2
    except Exception as e:   # Slack refused for good (not_in_channel, invalid_auth): one line, not a traceback
        print(f"triage: could not post to {args.channel}: {slack_error(e)}", file=sys.stderr)
        return 1
    print(said(out, args.channel))
    return 0


def add_parser(sub) -> None:
    n = sub.add_parser("notify", help="diagnose one job's logs and post the answer to a Slack channel")
    n.add_argument("files", nargs="+", help="the job's log files or directories (read together as one job)")
    n.add_argument("--channel", required=True, help="Slack channel id (C…) to post to")
    n.add_argument("--job", dest="notify_job", metavar="ID", help="job id (default: the Slurm job id in the logs or file names)")
    n.add_argument("--exit-code", type=int, help="the job's exit code (0 with no finding posts nothing)")
    n.add_argument("--only-failures", action="store_true", help="post only when something was found")
    n.add_argument("--lang", choices=("en", "ko"), default="en")
    n.set_defaults(func=cmd_notify)
