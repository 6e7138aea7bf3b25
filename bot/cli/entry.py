"""`triage` command line: diagnose logs, score a corpus."""
from __future__ import annotations

import argparse
import json
import os
import sys

from bot.settings import Settings, SettingsError
from core.ingest import UnusableInput
from bot.cli.emit import Emitter
from playbooks.engine import PlaybookError
from bot.wiring import engine as _engine, store as _store


def cmd_diagnose(args, settings: Settings) -> int:
    from bot.answer.render import terminal_safe
    store = _store(settings) if (args.record or args.llm) else None
    phraser = _phraser(settings, store) if args.llm else None
    status = 0
    config = _read_config(args.config) if args.config else None
    if args.config and config is None:
        return 2
    from bot.cli.parallel import jobs_for, split_jobs
    from core.inputs import log_paths
    paths, notes = log_paths(args.files)
    for note in notes:
        print(terminal_safe(f"triage: {note}"), file=sys.stderr)
    emit = Emitter(args, store, phraser, config)
    jobs = jobs_for(args.jobs, paths, args.together)
    if jobs > 1:
        return _diagnose_in_pool(paths, settings, args.lang, jobs, emit)
    engine, share = _engine(settings), split_jobs(args.jobs, paths)
    if args.together:
        inputs = _joined(paths, settings.max_bytes, _dir_label(args.files, len(paths)))
    else:
        inputs = _inputs(paths, settings.max_bytes)
    for src, progress in inputs:
        if src is None:
            status = 2
            continue
        try:
            d = engine.diagnose(src, args.lang, progress=progress, jobs=share)
        except UnusableInput as e:
            print(terminal_safe(f"triage: {e}"), file=sys.stderr)
            status = 2
            continue
        if progress is not None:
            sys.stderr.write("\n")
        emit(d)
    emit.done()
    return status


def _diagnose_in_pool(paths, settings: Settings, lang: str, jobs: int, emit) -> int:
    """--jobs: the files in worker processes, printed in the order given, as one by one would print them."""
    from bot.cli.parallel import diagnose_files
    from bot.answer.render import terminal_safe
    status = 0
    for outcomes in diagnose_files(paths, settings, lang, jobs):
        for kind, value in outcomes:
            if kind == "doc":
                emit(value)
                continue
            status = status if kind == "note" else 2
            print(f"triage: {value}" if kind == "bad" else terminal_safe(f"triage: {value}"), file=sys.stderr)
    emit.done()
    return status


def _read_config(path: str) -> str | None:
    try:
        text = open(path, encoding="utf-8").read()
        if path.lower().endswith(".json") or text.lstrip().startswith("{"):
            json.loads(text)
        return text
    except (OSError, UnicodeDecodeError, ValueError) as e:
        print(f"triage: {path}: cannot use it as a config ({type(e).__name__}: {str(e)[:120]})", file=sys.stderr)
        return None


def _inputs(paths: list[tuple[str, str]], max_bytes: int):
    """(source, progress) for every file and every member of every archive; (None, None) after a bad one."""
    from bot.answer.render import terminal_safe
    from core.inputs import open_inputs
    for path, name in paths:
        notes: list[str] = []
        try:
            for src in open_inputs(path, max_bytes, name, notes):
                yield src, _progress(path)
            for note in notes:   # members skipped past the cap, a damaged end: said once, after the members
                print(terminal_safe(f"triage: {note}"), file=sys.stderr)
        except UnusableInput as e:
            print(f"triage: {e}", file=sys.stderr)
            yield None, None
        except OSError as e:   # the first read failed (EIO): one line, exit code 2, the other files still read
            print(terminal_safe(f"triage: {name}: cannot read ({e.strerror or type(e).__name__})"), file=sys.stderr)
            yield None, None


def _joined(paths: list[tuple[str, str]], max_bytes: int, label: str | None = None):
    """--together: every file and archive member as one log (one job's per-node files)."""
    from core.inputs import Joined, open_inputs
    yield Joined(label or Joined.title([name for _, name in paths]),
                 [lambda p=p, n=n: open_inputs(p, max_bytes, n) for p, n in paths]), None


def _dir_label(args: list[str], files: int) -> str | None:
    """One log directory read together is named after the directory (a job id in it then groups the report)."""
    import os
    if len(args) == 1 and os.path.isdir(args[0]):
        return f"{os.path.basename(os.path.abspath(args[0]))}/ ({files} files)"
    return None


PROGRESS_FROM = 50 << 20


def _progress(path: str):
    """A progress line on stderr for big inputs, only when stderr is a terminal (never in CI or pipes)."""
    import os
    import time
    if path == "-" or not sys.stderr.isatty():
        return None
    try:
        total = os.path.getsize(path)
    except OSError:
        return None
    if total < PROGRESS_FROM:
        return None
    t0 = time.monotonic()

    def show(done: int, found: int) -> None:
        rate = done / max(time.monotonic() - t0, 1e-6) / 2**20
        pct = f"{min(done / total, 1):.0%}" if not path.endswith(".gz") else f"{done >> 20} MiB"
        sys.stderr.write(f"\r  {path.rsplit('/', 1)[-1]}: {pct} read, {rate:.0f} MiB/s, {found} symptom family(ies) "
                         "so far")
        sys.stderr.flush()
    return show


def _phraser(settings: Settings, store):
    cfg = settings.llm_config()
    if cfg is None:
        print("triage: --llm given but TRIAGE_LLM is not set; showing the deterministic diagnosis", file=sys.stderr)
        return None
    from bot.answer.llm import Phraser
    from knowledge.runbook import load as load_runbook
    return Phraser(cfg, load_runbook(), store)


def cmd_eval(args, settings: Settings) -> int:
    """Score one or more corpus files together (one table), e.g. tests/corpus/*.jsonl."""
    from bot.cli.evaluate import Score, evaluate, markdown_table, report, rule_changes
    engine, sc, corpora = _engine(settings), Score(), []
    for path in args.corpus:
        try:
            with open(path, encoding="utf-8") as fh:
                corpora.append(fh.readlines())
            evaluate(corpora[-1], engine, sc)
        except (OSError, UnicodeDecodeError) as e:
            print(f"triage: {path}: cannot read corpus ({e})", file=sys.stderr)
            return 2
        except ValueError as e:
            print(f"triage: {path}: {e}", file=sys.stderr)
            return 2
    print(markdown_table(sc) if args.markdown else report(sc), end="")
    if not engine.rules:
        return 0
    from playbooks.engine import Books
    base, without = type(engine)(Books(engine.books), engine.options, engine.backend), Score()
    for lines in corpora:
        evaluate(lines, base, without)
    changed = rule_changes(sc, without)
    print(f"\nteam rules ({len(engine.rules)}): " + (f"{len(changed)} answer(s) right without them are wrong with "
          "them — fix the rule before using it:" if changed else "no answer that was right without them changes"))
    print("\n".join(changed))
    return 1 if changed else 0


def cmd_serve(args, settings: Settings) -> int:
    from bot.slack.app import create_app
    from bot.slack.server import serve_http, serve_socket
    from bot.wiring import triage as make_triage
    from slack_sdk.errors import SlackApiError, SlackClientError
    _logging()
    mode = settings.require_slack()
    store = _store(settings, write=True)
    store.verify()
    triage = make_triage(settings, store)
    try:
        app = create_app(settings, triage)
    except (SlackApiError, SlackClientError, OSError) as e:
        print(f"triage: cannot reach Slack with SLACK_BOT_TOKEN ({type(e).__name__}: {str(e)[:200]})", file=sys.stderr)
        return 2
    if app.triage_bot.outbox is not None:
        app.triage_bot.outbox.start(app.client)
    app.triage_bot.resume()   # work a killed process left unfinished (bot.store.journal)
    if settings.report_channel:
        _schedule_reports(settings, triage, app)
    if mode == "socket":
        serve_socket(app, settings.slack_app_token.get_secret_value())
    else:
        serve_http(app, args.host, args.port, settings.slack_signing_secret.get_secret_value())
    return 0


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


def _schedule_reports(settings: Settings, triage, app) -> None:
    from datetime import datetime, timezone

    from bot import report
    from bot.proactive.schedule import Cron, Scheduler

    def job():
        report.post(app.client, settings.report_channel, report.last_week(triage.store))

    Scheduler(Cron(settings.report_cron, settings.tz), job, datetime.now(timezone.utc)).start(
        lambda: datetime.now(timezone.utc))


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


def _jobs(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--jobs takes a whole number of processes, 1 or more, not {text!r}")
    return int(text)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="triage", description="Triage distributed-training logs (PyTorch, NCCL, EFA).")
    p.add_argument("--version", action="version", version=f"triage {_version()}")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("diagnose", help="diagnose log files, directories, archives or stdin ('-')",
                       description="Name the root cause of a failed or slow training job from its log, with the "
                                   "evidence lines and the runbook's steps. Exit code 0 whatever was found; 2 for "
                                   "input that is not a log.")
    d.add_argument("files", nargs="+", metavar="FILE",
                   help="a log (plain or .gz), a .zip/.tar/.tar.gz of logs (each member diagnosed), a directory "
                        "(its .log/.out/.err/.txt/.gz/archive files), or - for stdin")
    d.add_argument("--json", action="store_true", help="one JSON object (triage.diagnosis/v1) per input, per line")
    d.add_argument("--config", metavar="FILE",
                   help="your DeepSpeed/HF config (JSON/YAML) or launch script: print the fix as a diff of it")
    d.add_argument("--record", action="store_true", help="also store the diagnosis in TRIAGE_DB (for reports)")
    d.add_argument("--lang", choices=("en", "ko"), default="en", help="language of the answer")
    d.add_argument("-v", "--verbose", action="store_true", help="also print the facts each finding was built from")
    d.add_argument("--color", choices=("auto", "always", "never"), default="auto",
                   help="colour the text: auto (on a terminal, unless NO_COLOR is set), always, never")
    d.add_argument("--llm", action="store_true", help="phrase the answer with TRIAGE_LLM (checked by the guard)")
    d.add_argument("--job", help="with --record: a job name to group diagnoses by")
    d.add_argument("--together", action="store_true",
                   help="read all files (and archive members) as one job's log: one diagnosis, ranks compared "
                        "across files, evidence as file:line")
    d.add_argument("--jobs", type=_jobs, default=0, metavar="N",
                   help="N worker processes: separate files each in its own, answers in the order given; one big "
                        "input's readers shared out over them, same answer (default: all cores for separate files "
                        "of 64 MiB or more in all, or one input of 32 MiB or more; 1: one process)")
    d.set_defaults(func=cmd_diagnose)
    s = sub.add_parser("serve", help="run the Slack bot (Socket Mode if SLACK_APP_TOKEN is set, else HTTP)",
                       description="Run the Slack bot. Needs SLACK_BOT_TOKEN, and SLACK_APP_TOKEN (Socket Mode) or "
                                   "SLACK_SIGNING_SECRET (HTTP mode); see the README's settings table.")
    s.add_argument("--port", type=int, default=3000,
                   help="HTTP mode: the port for /slack/events and /healthz (default 3000; ignored in Socket Mode)")
    s.add_argument("--host", default="0.0.0.0",
                   help="HTTP mode: the address to listen on (default 0.0.0.0; ignored in Socket Mode)")
    s.set_defaults(func=cmd_serve)
    r = sub.add_parser("report", help="weekly tuning report from the stored diagnoses (report.md + PNG charts)")
    r.add_argument("--since", default="7d", help="7d, 24h, 2w or a date (default 7d)")
    r.add_argument("--until", help="end of the period, a date (default now)")
    r.add_argument("--out", default="triage-report", help="output directory (default ./triage-report)")
    r.add_argument("--post", metavar="CHANNEL", help="also post it to this Slack channel")
    r.set_defaults(func=cmd_report)
    db = sub.add_parser("db", help="database maintenance")
    dbsub = db.add_subparsers(dest="db_command", required=True)
    b = dbsub.add_parser("backup", help="online backup of TRIAGE_DB to PATH")
    b.add_argument("path")
    b.set_defaults(func=cmd_db_backup)
    e = sub.add_parser("eval", help="score a labelled corpus (JSON lines with label/also/text)")
    e.add_argument("corpus", nargs="+", help="JSON-lines corpus file(s), scored together")
    e.add_argument("--markdown", action="store_true", help="print the per-symptom table as Markdown (the README's)")
    e.set_defaults(func=cmd_eval)
    from bot.cli.corpus import add_parser as add_corpus
    from bot.fleet.fleet import add_parser as add_fleet
    from bot.proactive.notify import add_parser as add_notify
    from bot.cli.plan import add_parser as add_plan
    from bot.cli.rules import add_parser as add_rules
    from bot.proactive.watch import add_parser as add_watch
    add_plan(sub)
    add_corpus(sub)
    add_notify(sub)
    add_watch(sub)
    add_rules(sub)
    add_fleet(sub)
    return p


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("train-triage")
    except PackageNotFoundError:   # run from a checkout without installing
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):
        parser.print_help()
        return 0
    args = parser.parse_args(argv)
    if getattr(args, "job", None) and not getattr(args, "record", False):
        parser.error("--job names the job a stored diagnosis belongs to: use it with --record")
    from bot.answer.terminal import SafeStderr
    stderr, sys.stderr = sys.stderr, SafeStderr(sys.stderr)   # names and notes on stderr never drive the terminal
    try:
        settings = Settings.from_env()
        return args.func(args, settings)
    except (SettingsError, PlaybookError) as e:
        print(f"triage: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        return 130
    finally:
        sys.stderr = stderr


if __name__ == "__main__":
    sys.exit(main())
