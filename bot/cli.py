"""`triage` command line: diagnose logs, score a corpus."""
from __future__ import annotations

import argparse
import json
import sys

from bot.settings import Settings, SettingsError
from core.ingest import UnusableInput, open_path
from playbooks.engine import Book, PlaybookError


def _books(settings: Settings) -> list[Book]:
    from knowledge.runbook import load as load_runbook
    from playbooks.engine import load
    books = load(settings.playbooks)
    runbook = load_runbook()
    for b in books:
        for step in b.playbook.steps:
            for cite in step.cite:
                if cite not in runbook:
                    raise PlaybookError(f"{b.path}: step {step.id} cites '{cite}', which is not a runbook section")
    return books


def cmd_diagnose(args, settings: Settings) -> int:
    from bot.engine import diagnose
    from bot.render import diagnosis_text
    books = _books(settings)
    status = 0
    for path in args.files:
        try:
            src = open_path(path, settings.max_bytes)
            d = diagnose(src, books)
        except UnusableInput as e:
            print(f"triage: {e}", file=sys.stderr)
            status = 2
            continue
        if args.json:
            print(json.dumps(d.to_json_dict(), ensure_ascii=False))
        else:
            print(diagnosis_text(d))
        sys.stdout.flush()
    return status


def cmd_eval(args, settings: Settings) -> int:
    from bot.evaluate import evaluate, report
    try:
        with open(args.corpus, encoding="utf-8") as fh:
            lines = fh.readlines()
    except (OSError, UnicodeDecodeError) as e:
        print(f"triage: {args.corpus}: cannot read corpus ({e})", file=sys.stderr)
        return 2
    try:
        sc = evaluate(lines, _books(settings))
    except ValueError as e:
        print(f"triage: {args.corpus}: {e}", file=sys.stderr)
        return 2
    print(report(sc), end="")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="triage", description="Triage distributed-training logs (PyTorch, NCCL, EFA).")
    sub = p.add_subparsers(dest="command", required=True)
    d = sub.add_parser("diagnose", help="diagnose log files (plain or .gz) or stdin ('-')")
    d.add_argument("files", nargs="+", metavar="FILE", help="log file, .gz file, or - for stdin")
    d.add_argument("--json", action="store_true", help="one JSON object (triage.diagnosis/v1) per input, per line")
    d.set_defaults(func=cmd_diagnose)
    e = sub.add_parser("eval", help="score a labelled corpus (JSON lines with label/also/text)")
    e.add_argument("corpus")
    e.set_defaults(func=cmd_eval)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
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


if __name__ == "__main__":
    sys.exit(main())
