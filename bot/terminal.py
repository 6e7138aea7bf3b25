"""The diagnosis text on a terminal: wrapped to its width and coloured, only where a person reads it (a TTY, or
`--color always`; never with NO_COLOR set and `--color auto`). Lines that are pasted — changes, commands, evidence —
are never wrapped, so a copy stays one line."""
from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap

_STEP = re.compile(r"^(\s*)(\d+\.|-) (\[[^\]]+\] )")
_HEAD = re.compile(r"^(ROOT CAUSE|ALSO|근본 원인|함께 발견)  \[([^\]]+)\]")
_SECTION = re.compile(r"^  [^\s].*:$")
_CHANGE = re.compile(r"^ {9}(?!runbook:|런북:)\S")
_SEVERE = ("critical", "error", "심각", "오류")
RED, YELLOW, BOLD, CYAN, DIM, RESET = "\x1b[31;1m", "\x1b[33;1m", "\x1b[1m", "\x1b[36m", "\x1b[2m", "\x1b[0m"


def use_color(mode: str, stream=sys.stdout) -> bool:
    if mode == "always":
        return True
    if mode == "never" or os.environ.get("NO_COLOR"):
        return False
    return stream.isatty()


def width(stream=sys.stdout) -> int | None:
    """The terminal's width, or None when the output is not a terminal (a pipe or file keeps whole lines)."""
    return shutil.get_terminal_size((100, 24)).columns if stream.isatty() else None


def wrap(text: str, cols: int) -> str:
    """Step texts wrapped under their own indentation; every other line as it is."""
    out = []
    for line in text.splitlines():
        m = _STEP.match(line)
        if m and len(line) > cols:
            indent = " " * (len(m.group(1)) + len(m.group(2)) + 1)
            out += textwrap.wrap(line, max(cols, 40), subsequent_indent=indent, break_on_hyphens=False)
        else:
            out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def colour(text: str) -> str:
    out = []
    for line in text.splitlines():
        m = _HEAD.match(line)
        if m:
            line = (RED if m.group(2) in _SEVERE else YELLOW) + line + RESET
        elif _SECTION.match(line) or line.startswith("== "):
            line = BOLD + line + RESET
        elif _CHANGE.match(line):
            line = CYAN + line + RESET
        elif line.lstrip().startswith(("runbook:", "런북:")):
            line = DIM + line + RESET
        out.append(line)
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def for_terminal(text: str, mode: str = "auto", stream=sys.stdout) -> str:
    cols = width(stream)
    if cols:
        text = wrap(text, cols)
    return colour(text) if use_color(mode, stream) else text
