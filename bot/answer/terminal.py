"""The CLI on a terminal.

The diagnosis text: wrapped to the terminal's width and coloured, only where a person reads it (a TTY, or
`--color always`; never with NO_COLOR set and `--color auto`). Lines that are pasted — changes, commands, evidence —
are never wrapped, so a copy stays one line.

What the CLI writes on stderr, made inert: file names, archive members, notes and errors can hold OSC 52
(clipboard), OSC 8 (hyperlinks) or CSI sequences from whoever named the file. One wrapper around sys.stderr
(installed by bot.cli.main) escapes every control character but newline and tab, and a carriage return that starts a
write (the progress line redraws itself that way)."""
from __future__ import annotations

import os
import re
import shutil
import sys
import unicodedata

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


def columns(text: str) -> int:
    """How many terminal columns a text takes: wide characters (Hangul, CJK) take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _wrap_line(line: str, cols: int, indent: str) -> list[str]:
    out, cur = [], ""
    for word in line.split(" "):
        trial = f"{cur} {word}" if cur else word
        if cur and columns(trial) > cols:
            out.append(cur)
            cur = indent + word
        else:
            cur = trial
    return out + [cur]


def wrap(text: str, cols: int) -> str:
    """Step texts wrapped under their own indentation, by display width; every other line as it is."""
    out = []
    for line in text.splitlines():
        m = _STEP.match(line)
        if m and columns(line) > cols:
            indent = " " * (len(m.group(1)) + len(m.group(2)) + 1)
            out += _wrap_line(line, max(cols, 40), indent)
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


def inert(text: str) -> str:
    from bot.answer.render import terminal_safe   # the one escaping of control characters
    return terminal_safe(text)


class SafeStderr:
    """A text stream that writes `inert` text to the stream it wraps; everything else is the wrapped stream's."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        lead = "\r" if text.startswith("\r") else ""
        self._stream.write(lead + inert(text[len(lead):]))
        return len(text)

    def __getattr__(self, name):
        return getattr(self._stream, name)
