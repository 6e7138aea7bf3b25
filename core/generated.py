"""Blocks of a text file generated from data (the runbook's version rules, the README's corpus table): the part
between two marker lines is rewritten, the rest left as written."""
from __future__ import annotations

from pathlib import Path


def replace_marked(path: Path, begin: str, end: str, replacement: str) -> bool:
    """Put `replacement` (markers included) where the file has begin…end; True when the file changed."""
    text = path.read_text(encoding="utf-8")
    start, stop = text.index(begin), text.index(end) + len(end)
    new = text[:start] + replacement + text[stop:]
    if new != text:
        path.write_text(new, encoding="utf-8")
    return new != text
