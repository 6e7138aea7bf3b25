"""Line families (the reader contract's declared lines, parsers/base.py) and the pure-Python feeder.

A Family names the lines it wants by literals (`select`) and the fields it reads from them, each a pattern with one
group in the subset Rust `regex` and Python `regex` read alike. A feeder turns a newline-aligned byte chunk into one
Rows batch per family: the line numbers, one column per field (text or None), the line's text where the family asks
for it (or where a field in `need` did not match), and, for a family with `distinct`, rows equal to the previous
kept row on those fields dropped (each row says how many it stands for). This module is the feeder for small inputs
(a paste: no heavy import); parsers/scan/native.py gives the same rows natively for large ones (tests/test_feeders.py
holds the two to the same answers)."""
from __future__ import annotations

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


def _lines_of(buf: bytes, fam: Family, split: list) -> list[tuple[int, bytes]]:
    """(0-based line index in the chunk, the line) for every line holding a selecting literal. C-level searches:
    where the family holds many of the chunk's lines, one test of each line of the split chunk (`split`: the
    chunk's lines, made once for all families); else a find for each occurrence."""
    sels = [s.encode() for s in fam.select]
    n = sum(map(buf.count, sels))
    if not n:
        return []
    if n << 12 > len(buf):   # dense: more than one a 4 KiB
        if not split:
            split.extend(buf.split(b"\n"))
        if len(sels) == 1:
            s = sels[0]
            return [(k, line) for k, line in enumerate(split) if s in line]
        return [(k, line) for k, line in enumerate(split) if any(s in line for s in sels)]
    out, no, counted, size = [], 0, 0, len(buf)
    nxt = {s: buf.find(s) for s in sels}
    while True:
        at = min((p for p in nxt.values() if p >= 0), default=-1)
        if at < 0:
            return out
        ls = buf.rfind(b"\n", 0, at) + 1
        le = buf.find(b"\n", at)
        le = size if le < 0 else le
        no += buf.count(b"\n", counted, ls)
        counted = ls
        out.append((no, buf[ls:le]))
        for s, p in nxt.items():
            if 0 <= p <= le:
                nxt[s] = buf.find(s, le + 1)


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
    """Every family's rows in `buf`, whose first line is number first_no + 1 (a column at a time: each field's
    pattern over the family's lines in one comprehension)."""
    out, split = [], []
    for fam in families:
        got = _lines_of(buf, fam, split)
        lines = [decode(raw) for _, raw in got]
        cols = {}
        for n, p in fam.fields:
            search = compiled(p).search
            cols[n] = [m.group(1) if (m := search(line)) is not None else None for line in lines]
        if fam.text:
            text: list[str | None] = lines
        elif fam.need:
            need = [cols[n] for n in fam.need]
            text = [line if None in vs else None for line, *vs in zip(lines, *need)]
        else:
            text = [None] * len(lines)
        no = [first_no + i + 1 for i, _ in got]
        if not fam.distinct:
            out.append(Rows(fam, no=no, fields=cols, text=text, count=[1] * len(no)))
            continue
        rows = Rows(fam, fields={n: [] for n, _ in fam.fields})
        names = [n for n, _ in fam.fields]
        for k, line_no in enumerate(no):
            add_row(rows, state, line_no, {n: cols[n][k] for n in names}, text[k])
        out.append(rows)
    return out
