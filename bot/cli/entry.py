"""`triage`: the argparse tree (each subcommand's module adds its own parser) and running one subcommand."""
from __future__ import annotations

import argparse
import os
import sys

from bot.settings import Settings, SettingsError
from playbooks.engine import PlaybookError



class SubcommandParser(argparse.ArgumentParser):
    """A subcommand's parser: an option it does not know is its own error, shown with its own usage (`usage: triage
    diagnose …`, exit code 2), not the top-level parser's."""

    def parse_known_args(self, args=None, namespace=None):
        ns, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return ns, extras


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="triage", description="Triage distributed-training logs (PyTorch, NCCL, EFA).")
    p.add_argument("--version", action="version", version=f"triage {_version()}")
    sub = p.add_subparsers(dest="command", required=True, parser_class=SubcommandParser)
    from bot.cli import completion, corpus, db, diagnose, evaluate, fleet, notify, plan, report, rules, serve, watch
    # the subcommands in the order `triage --help` lists them; each module adds its own parser
    for room in (diagnose, serve, report, db, evaluate, plan, corpus, notify, watch, rules, fleet, completion):
        room.add_parser(sub)
    return p


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version
    try:
        return version("train-triage")
    except PackageNotFoundError:   # run from a checkout without installing
        return "unknown (not installed)"


# Polars' allocator (jemalloc, used by the engine's native line reader) keeps freed pages for 10 s by default: over a
# 200 MiB log's chunks that held ~20 MiB more at the peak (with the library itself, 48 MiB, past the 200 MiB limit);
# given back at once, at the same speed here. Set before anything loads Polars; a setting made outside is kept.
ALLOCATOR = ("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0,narenas:1,tcache:false")


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault(*ALLOCATOR)
    parser = build_parser()
    if not (sys.argv[1:] if argv is None else argv):   # bare `triage`: the usage on stderr, exit code 2
        parser.print_usage(sys.stderr)
        print("triage: a command is needed (triage --help lists them)", file=sys.stderr)
        return 2
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
