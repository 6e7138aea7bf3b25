"""`triage diagnose FILE…|-`: read logs (files, directories, archives, stdin), diagnose each (or all together), print
the answers (bot.cli.emit) in the order given, in worker processes for many big files (bot.cli.parallel)."""
from __future__ import annotations

import argparse
import json
import sys

from bot.cli.emit import Emitter
from bot.settings import Settings
from bot.wiring import engine as _engine, store as _store
from core.ingest import UnusableInput


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
    if any(path == "-" for path, _ in paths) and sys.stdin.isatty():   # a person at a prompt, not a pipe: say so
        print("triage: waiting for the log on stdin: paste it, then press Ctrl-D (on a line of its own) to end",
              file=sys.stderr)
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


def _jobs(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"--jobs takes a whole number of processes, 1 or more, not {text!r}")
    return int(text)


def add_parser(sub) -> None:
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
