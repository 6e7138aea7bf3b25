"""`triage watch DIR`: post each failed job's diagnosis once its logs have settled (bot.proactive.watch)."""
from __future__ import annotations

import os
import sys
import threading

from bot.proactive.watch import Watcher, duration


def cmd_watch(args, settings) -> int:
    import signal

    from bot.wiring import store
    from bot.proactive.notify import Notifier, slack_ready
    try:
        settle, max_age = duration(args.settle), duration(args.max_age)
    except ValueError as e:
        print(f"triage: {e}", file=sys.stderr)
        return 2
    why = slack_ready(settings) or (None if os.path.isdir(args.dir) else f"{args.dir}: not a directory")
    if why:
        print(f"triage: {why}", file=sys.stderr)
        return 2
    watcher = Watcher(args.dir, Notifier(settings, store(settings, write=True), args.channel, args.lang),
                      settle, max_age, args.follow_symlinks)
    stop = threading.Event()
    if args.once:
        stop.set()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())   # a Kubernetes sidecar is stopped with SIGTERM
    failed = watcher.run(stop, min(max(settle / 4, 1.0), 30.0))
    return 1 if args.once and failed else 0   # --once: every other job was still handled, then exit 1


def add_parser(sub) -> None:
    w = sub.add_parser("watch", help="watch a job-log directory and post each failed job's diagnosis once")
    w.add_argument("dir", help="the directory jobs write their logs to (one sub-directory or Slurm job id per job)")
    w.add_argument("--channel", required=True, help="Slack channel id (C…) to post to")
    w.add_argument("--settle", default="60s", help="a job's logs must be unchanged this long (default 60s)")
    w.add_argument("--max-age", default="24h", help="ignore jobs whose logs last changed longer ago (default 24h)")
    w.add_argument("--once", action="store_true", help="one pass, then exit (for a cron job or Kubernetes CronJob)")
    w.add_argument("--lang", choices=("en", "ko"), default="en")
    w.add_argument("--follow-symlinks", action="store_true",
                   help="also read log files behind symbolic links that lead out of DIR (off: never)")
    w.set_defaults(func=cmd_watch)
