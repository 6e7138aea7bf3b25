"""What the CLI writes on stderr, made inert for the reader's terminal: file names, archive members, notes and
errors can hold OSC 52 (clipboard), OSC 8 (hyperlinks) or CSI sequences from whoever named the file. One wrapper
around sys.stderr (installed by bot.cli.main) escapes every control character but newline and tab, and a carriage
return that starts a write (the progress line redraws itself that way)."""
from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def inert(text: str) -> str:
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


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
