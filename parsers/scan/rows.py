"""Line families (the reader contract's declared lines, parsers/base.py) and the pure-Python feeder.

A Family names the lines it wants by literals (`select`) and the fields it reads from them, each a pattern with one
group in the subset Rust `regex` and Python `regex` read alike. A feeder turns a newline-aligned byte chunk into one
Rows batch per family: the line numbers, one column per field (text or None), the line's text where the family asks
for it (or where a field in `need` did not match), and, for a family with `distinct`, rows equal to the previous
kept row on those fields dropped (each row says how many it stands for). This module is the feeder for small inputs
(a paste: no heavy import); parsers/scan/native.py gives the same rows natively for large ones (tests/test_feeders.py
holds the two to the same answers)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import regex

PY_MAX = 2 << 20   # a chunk up to this size is read by this feeder under "auto"; a bigger one natively


@dataclass(frozen=True)
class Family:
    name: str
    select: tuple[str, ...]                    # a line holding any of these literals is the family's
    fields: tuple[tuple[str, str], ...] = ()   # (field name, pattern whose group 1 is the value)
    need: tuple[str, ...] = ()                 # a row missing one of these fields carries its text
    text: bool = False                         # every row carries its line's text
    distinct: tuple[str, ...] = ()             # a row like the previous kept one on these fields is only counted


@dataclass
class Rows:
    """One family's rows from one chunk, in line order. `text[i]` is the whole line as read (decoded, not cleaned)
    or None; `count[i]` how many lines row i stands for (itself and the copies after it that `distinct` dropped)."""
    family: Family
    no: list[int] = field(default_factory=list)
    fields: dict[str, list[Any]] = field(default_factory=dict)
    text: list[str | None] = field(default_factory=list)
    count: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.no)

    def get(self, name: str) -> list[Any]:
        return self.fields[name]

    def as_tuples(self) -> list[tuple]:
        """Every row as (line, fields…, text, count): what the parity test compares."""
        cols = [self.fields[n] for n, _ in self.family.fields]
        return list(zip(self.no, *cols, self.text, self.count))


class State:
    """What a family keeps between chunks: the `distinct` key of its last row (a copy of it opening the next chunk
    is dropped without being counted: counts are per chunk)."""

    def __init__(self) -> None:
        self.last: dict[str, tuple] = {}


_COMPILED: dict[str, regex.Pattern] = {}


def compiled(pattern: str) -> regex.Pattern:
    p = _COMPILED.get(pattern)
    if p is None:
        p = _COMPILED[pattern] = regex.compile(pattern, regex.VERSION0)
    return p


def decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _lines_of(buf: bytes, fam: Family) -> list[tuple[int, bytes]]:
    """(0-based line index in the chunk, the line) for every line holding a selecting literal."""
    pat = re.compile(b"|".join(re.escape(s.encode()) for s in sorted(fam.select, key=len, reverse=True)))
    out, pos, no, counted, n = [], 0, 0, 0, len(buf)
    while (m := pat.search(buf, pos)) is not None:
        ls = buf.rfind(b"\n", 0, m.start()) + 1
        le = buf.find(b"\n", m.end())
        le = n if le < 0 else le
        no += buf.count(b"\n", counted, ls)
        counted = ls
        out.append((no, buf[ls:le]))
        pos = le + 1
    return out


def add_row(rows: Rows, state: State, no: int, values: dict[str, Any], text: str | None) -> None:
    """One row onto the batch, or onto the previous kept row's count when `distinct` says it is a copy."""
    fam = rows.family
    if fam.distinct:
        key = tuple(values[k] for k in fam.distinct)
        copy = None not in key and state.last.get(fam.name) == key
        state.last[fam.name] = key
        if copy:
            if rows.count:
                rows.count[-1] += 1
            return
    rows.no.append(no)
    for k, v in values.items():
        rows.fields[k].append(v)
    rows.text.append(text)
    rows.count.append(1)


def python_rows(buf: bytes, families: list[Family], first_no: int, state: State) -> list[Rows]:
    """Every family's rows in `buf`, whose first line is number first_no + 1."""
    out = []
    for fam in families:
        rows = Rows(fam, fields={n: [] for n, _ in fam.fields})
        pats = [(n, compiled(p)) for n, p in fam.fields]
        for i, raw in _lines_of(buf, fam):
            line = decode(raw)
            values = {}
            for n, p in pats:
                m = p.search(line)
                values[n] = m.group(1) if m else None
            keep = fam.text or any(values[n] is None for n in fam.need)
            add_row(rows, state, first_no + i + 1, values, line if keep else None)
        out.append(rows)
    return out
