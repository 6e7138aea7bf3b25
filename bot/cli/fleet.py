"""`triage fleet SOURCE…`: the command line of bot.fleet (options, checks, the summary printed)."""
from __future__ import annotations

import os
import sys

from bot.fleet.fleet import Fleet


def _options(args) -> tuple[float | None, float] | str:
    """(--since in seconds or None, --timeout in seconds), or what is wrong with them."""
    from bot.proactive.watch import duration
    try:
        return (duration(args.since) if args.since else None), duration(args.timeout)
    except ValueError as e:
        return str(e)


def _missing(args) -> str | None:
    """Why this run cannot start on this installation (no Ray, no boto3 for S3), or None."""
    import importlib.util
    from bot.fleet.run import INSTALL, ray_missing
    if args.jobs and args.ray is not None:
        return "--ray and --jobs: choose one (--jobs N reads on this machine without Ray)"
    if not args.jobs and ray_missing():
        return ray_missing()
    if any(s.startswith("s3://") for s in args.sources) and importlib.util.find_spec("boto3") is None:
        return INSTALL.replace("runs on Ray", "reads S3 with boto3")
    return None


def cmd_fleet(args, settings) -> int:
    from bot.fleet.jobs import Spec, list_jobs
    from bot.fleet.run import on_processes, on_ray
    from bot.wiring import engine, store
    opts, why = _options(args), _missing(args)
    if isinstance(opts, str) or why:
        print(f"triage: {why or opts}", file=sys.stderr)
        return 2
    since, timeout = opts
    endpoint = args.s3_endpoint or os.environ.get("AWS_ENDPOINT_URL") or None
    spec = Spec(engine(settings), settings.max_bytes, args.lang, timeout, endpoint)
    out = open(args.out, "w", encoding="utf-8") if args.out else sys.stdout
    fleet = Fleet(out, store(settings) if args.record else None, since, sys.stderr.isatty())
    todo = fleet.todo(list_jobs(args.sources, endpoint))
    if args.jobs:
        rows, where = on_processes(todo, spec, args.jobs), f"this machine ({args.jobs} process(es))"
    else:
        address = args.ray or "local"
        rows, where = on_ray(todo, spec, address, args.workers), f"Ray ({address})"
    try:
        for row in rows:
            fleet.take(row)
    finally:
        if fleet.progress:
            sys.stderr.write("\n")
        if args.out:
            out.close()
    print(fleet.summary(where), file=sys.stdout if args.out else sys.stderr)
    return 1 if fleet.status["failed"] else 0


def _count(text: str) -> int:
    import argparse
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a whole number, 1 or more, not {text!r}")
    return int(text)


def add_parser(sub) -> None:
    f = sub.add_parser("fleet", help="triage every job under directories, globs or S3 prefixes, on Ray",
                       description="Triage a whole fleet's job logs: every job (a sub-directory or prefix, or the "
                                   "files sharing a Slurm job id) read as one log, as diagnose --together does, by "
                                   "Ray Data tasks or --jobs N local processes. Exit 0; 1 when a job failed; 2 when "
                                   "the run cannot start (no Ray: pip install '.[fleet]').")
    f.add_argument("sources", nargs="+", metavar="SOURCE",
                   help="a directory of job logs, a glob ('/fsx/logs/2026-*'), or s3://bucket/prefix")
    f.add_argument("--since", help="only jobs whose newest log changed within this span (7d, 24h; default: all)")
    f.add_argument("--ray", metavar="ADDRESS", default=None,
                   help="local (default: a Ray started here), auto (the cluster this machine belongs to), or a "
                        "cluster address (ray://head:10001)")
    f.add_argument("--workers", type=_count, default=0, metavar="N",
                   help="at most N jobs read at once (default: every CPU Ray has; with --ray local, Ray starts with N)")
    f.add_argument("--jobs", type=_count, default=0, metavar="N",
                   help="read on this machine with N processes instead, without Ray")
    f.add_argument("--record", action="store_true",
                   help="store the results in TRIAGE_DB (for the weekly report), once per job and file signature")
    f.add_argument("--out", metavar="FILE", help="write the JSON lines here (default: stdout)")
    f.add_argument("--timeout", default="10m", help="give up on one job after this long (default 10m)")
    f.add_argument("--s3-endpoint", metavar="URL",
                   help="an S3-compatible endpoint (default: AWS_ENDPOINT_URL, else AWS's own)")
    f.add_argument("--lang", choices=("en", "ko"), default="en")
    f.set_defaults(func=cmd_fleet)
