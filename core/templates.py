"""Error lines grouped into masked templates (Drain-style masking rules as data): one error repeated across ranks,
nodes and steps is one template. Used to collect the error lines no parser explains and to drop those a finding's
evidence already shows."""
from __future__ import annotations

import re

# Applied in order, the most specific first.
MASKS: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"^\S+ \[std(?:err|out)\]\s+"), ""),
    (re.compile(r"^\[(?:rank|default)\d+\]:\s*|^\[\d+,\d+\]<std\w+>:\s*"), ""),
    (re.compile(r"^(?:\S+:\s+)?[\w.-]+:\d+:\d+ \[\d+\]\s+"), "<node:pid> "),
    (re.compile(r"^\[?\d{4}-\d\d-\d\d[T ][\d:.,]+\]?\s*|^\w{3}\s+\d+\s+[\d:]+\s+\S+\s+"), ""),
    (re.compile(r"\[[EWIF]\d{3,4} [\d:.]+ [^\]]*\]\s*"), ""),
    (re.compile(r"(?:/[\w.@+-]+)+/?"), "<path>"),
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}(?::\d+|<\d+>)?"), "<ip>"),
    (re.compile(r"\bip-\d+-\d+-\d+-\d+\S*"), "<host>"),
    (re.compile(r"0x[0-9a-fA-F]+|\b[0-9a-f]{8,}\b"), "<hex>"),
    (re.compile(r"\b[Rr]ank[ =:]*\d+\b"), "rank <n>"),
    (re.compile(r"\d+(?:\.\d+)?"), "<n>"),
)
SHOWN = 20   # templates kept in a diagnosis


def template(line: str) -> str:
    t = line.strip()
    for pat, rep in MASKS:
        t = pat.sub(rep, t)
    return re.sub(r"\s+", " ", t)[:200]


def shorten(text: str, limit: int) -> str:
    """At most `limit` characters, cut at a word boundary with an ellipsis (never mid-word)."""
    if len(text) <= limit:
        return text
    cut = text.rfind(" ", 0, limit - 1)
    return text[:cut if cut > limit // 2 else limit - 1].rstrip() + "…"


def unexplained(rows: list[dict], evidence_texts) -> list[dict]:
    """The template rows (most frequent first) whose template no evidence line shares."""
    claimed = {template(t) for t in evidence_texts}
    return [r for r in rows if r["template"] not in claimed][:SHOWN]
