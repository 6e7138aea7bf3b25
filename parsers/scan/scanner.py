"""One pass over newline-aligned byte chunks: find candidate lines with one multi-literal search, clean them,
attach the context the claiming parsers asked for, and feed them to those parsers in line order."""
from __future__ import annotations

import logging
import re
from collections import deque
from pathlib import Path
from time import perf_counter
from typing import Sequence

from parsers.scan.base import Hit, Reader, unprefix
from parsers.scan.backends import BACKENDS, make_backend, presence
from parsers.scan.rows import PY_MAX, State, python_rows

__all__ = ["BACKENDS", "MAX_TEXT", "Scanner", "clean", "make_backend"]

log = logging.getLogger("triage.scan")

MAX_TEXT = 8192
BULK_LOOKS = 16   # chunks (8 MiB each) judged for chunk-wide reading before line by line is settled for good
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[()][A-Z0-9]")


def clean(raw: bytes, focus: int = 0) -> str:
    """Decode one line, drop ANSI colour codes, keep what a terminal shows after carriage-return redraws."""
    if len(raw) > MAX_TEXT:
        start = max(0, min(focus - MAX_TEXT // 2, len(raw) - MAX_TEXT))
        raw = raw[start:start + MAX_TEXT]
    if b"\r" in raw and b"\x1b" not in raw:   # a tqdm line: decode only the last segment that shows something
        end = len(raw)
        while end >= 0:
            start = raw.rfind(b"\r", 0, end) + 1
            seg = raw[start:end].decode("utf-8", errors="replace")
            if seg.strip():
                return seg
            end = start - 1
        return ""
    text = raw.decode("utf-8", errors="replace")
    if "\x1b" in text:
        text = _ANSI.sub("", text)
    if "\r" in text:
        parts = [p for p in text.split("\r") if p.strip()]
        text = parts[-1] if parts else ""
    return text


def hit_of(no: int, line: str) -> Hit:
    """A family row's line (its text, as the feeders give it) as the Hit a reader would have been fed for it."""
    raw = clean(line.encode("utf-8", "surrogateescape"))
    cut, label, text = unprefix(raw)
    return Hit(no, text, cut=cut, label=label, raw=raw)


FEEDERS = ("auto", "python", "polars")


def clean_line(raw: bytes, keep_label: bool = False) -> str:
    """A context line as readers see it: cleaned, and without the noise prefixes a transport put in front (and
    without the launcher labels, unless `keep_label`)."""
    _, label, text = unprefix(clean(raw))
    return label + text if keep_label else text


class _Owners(dict):
    """literal -> the parsers it concerns. A matched literal also stands for every shorter trigger inside it
    (scanner matches do not overlap); that closure is worked out the first time a literal matches, since most
    of the few hundred literals never do in a given log."""

    def __init__(self, direct: dict[bytes, set[int]]):
        super().__init__()
        self.direct = direct

    def __missing__(self, lit: bytes) -> tuple[int, ...]:
        who = self[lit] = tuple(sorted(set().union(*(ix for t, ix in self.direct.items() if t in lit))))
        return who


class _Feeder:
    """The families' rows for each chunk: the pure-Python feeder for a small chunk (or when asked), the native one for
    a big chunk it can read line for line (parsers/scan/native.py). A family none of whose selectors is in the chunk,
    or whose reader wants no more rows (Reader.wants_rows), is not read at all: it would give its reader nothing."""

    def __init__(self, readers: Sequence[Reader], prefer: str = "auto"):
        if prefer not in FEEDERS:
            raise ValueError(f"feeder must be one of {', '.join(FEEDERS)}, not {prefer!r}")
        self.prefer, self.state = prefer, State()
        self.owner = {f.name: i for i, r in enumerate(readers) for f in getattr(r, "families", ())}
        self.families = [f for r in readers for f in getattr(r, "families", ())]
        self.sel = {f.name: tuple(x.encode() for x in f.select) for f in self.families}
        self.present = presence(tuple(sorted({x for v in self.sel.values() for x in v}))) if self.families else None

    def rows(self, buf: bytes, first_no: int, active, readers: Sequence) -> list:
        fams = [f for f in self.families if (active is None or self.owner[f.name] in active)
                and getattr(readers[self.owner[f.name]], "wants_rows", _no)(f)]
        if not fams:
            return []
        held = self.present(buf)
        fams = [f for f in fams if not held.isdisjoint(self.sel[f.name])]
        if not fams:
            return []
        if self.prefer == "polars" or (self.prefer == "auto" and len(buf) > PY_MAX):
            try:
                import parsers.scan.native as scan_polars
            except ImportError:   # (polars is a dependency; a broken install still reads, in Python)
                scan_polars = None
            df = scan_polars.frame(buf) if scan_polars is not None else None
            if df is not None:
                return scan_polars.rows(df, fams, first_no, self.state)
        return python_rows(buf, fams, first_no, self.state)


def _no(family) -> bool:
    return False   # (a reader switched off: _Off)


class _Off:
    """Stands in for a reader that raised: it reads nothing more (the others go on)."""
    before = after = 0
    bulk = None   # never judged for chunk-wide reading again

    def __init__(self, name: str):
        self.name = name

    def feed(self, hit: Hit) -> None:
        pass


class Scanner:
    def __init__(self, parsers: Sequence[Reader], backend: str = "auto", cache: Path | None = None,
                 feeder: str = "auto"):
        self.parsers = list(parsers)
        self.feeder = _Feeder(self.parsers, feeder)
        self.cache = cache                 # where Hyperscan's compiled database is kept between processes
        self.failed: dict[str, str] = {}   # reader name -> the exception it raised (a bug: it is switched off)
        self.backend_name = backend
        self.bulk: list[int] = []          # parsers reading their dominant line format chunk-wide
        self._looks = 0                    # chunks judged for bulk reading so far
        self._bulk_capable = sum(p.bulk is not None for p in self.parsers)
        self.active: frozenset[int] | None = None   # the readers this process feeds (engine.split); None: all
        self.cost: list[float] | None = None       # seconds each reader took, while measured (engine.split)
        self._index(set())
        self.max_before = max((p.before for p in parsers), default=0)
        self.lines = 0
        self._tail: deque[bytes] = deque(maxlen=max(self.max_before, 1))
        self._pending: list[tuple[Hit, tuple[int, ...], int]] = []

    def _index(self, bulk: set[int]) -> None:
        owners: dict[bytes, set[int]] = {}
        for i, p in enumerate(self.parsers):
            for t in (p.bulk_triggers if i in bulk else p.triggers):
                owners.setdefault(t.encode(), set()).add(i)
        # A line one of its families selects reaches a reader as a row, not a Hit: the selectors are looked for
        # only on the lines a trigger of such a reader found (_claimants), never searched for in the whole chunk.
        self._sel_of = {i: tuple(s.encode() for f in getattr(p, "families", ()) for s in f.select)
                        for i, p in enumerate(self.parsers) if getattr(p, "families", ())}
        self._shadow = {t: s for t, ix in owners.items() if (s := self._shadowing(t, ix)) is not None}
        # Every reader's triggers are searched for, fed or not, so that the candidate lines (and a long line's
        # window, which centres on its first trigger) are the same in every process that reads part of the readers.
        self._all_owners = owners
        self._matchers: dict[frozenset[bytes], object] = {}
        self.backend = self._matcher(frozenset())
        self._own()

    def _shadowing(self, t: bytes, readers: set[int]) -> bytes | None:
        """The selector that holds trigger t once, shared by every reader t concerns (Megatron's TFLOP/s figure in
        its family's selector): a chunk where every t lies inside that selector needs no search for t. t must not
        overlap itself, so that bytes.count finds every occurrence of it."""
        if any(t[:k] == t[-k:] for k in range(1, len(t))):
            return None
        common = set.intersection(*(set(self._sel_of.get(i, ())) for i in readers))
        return next((s for s in sorted(common) if s.count(t) == 1), None)

    def _matcher(self, dropped: frozenset[bytes]):
        m = self._matchers.get(dropped)
        if m is None:
            m = self._matchers[dropped] = make_backend([t for t in self._all_owners if t not in dropped],
                                                       self.backend_name, self.cache)
        return m

    def _own(self) -> None:
        """Which readers each trigger feeds here: all of them, or those of this process's share."""
        owners = self._all_owners
        self.owners = _Owners(owners if self.active is None else {t: ix & self.active for t, ix in owners.items()})
        self._who: dict[tuple[bytes, ...], tuple[int, ...]] = {}   # the literals found on a line -> its readers
        self._span: dict[tuple[int, ...], tuple[int, int]] = {}    # readers -> the context lines they ask for

    def restrict(self, active: frozenset[int]) -> None:
        """Feed only these readers from now on (the others are read in another process); stop measuring. The
        triggers searched for stay the same, so the matcher is kept."""
        self.active, self.cost = active, None
        self._own()
        self._pending = [(hit, tuple(i for i in who if i in active), need) for hit, who, need in self._pending]

    def _decide_bulk(self, buf: bytes) -> None:
        """A parser whose bulk pattern covers most lines (a plain Megatron training log) reads those lines with one
        C-level pass per chunk instead of line by line. Judged on the first MiB, else on the whole chunk, then on
        each whole chunk until it holds, for the first BULK_LOOKS chunks: a job's log often opens with megabytes of
        NCCL set-up (the first MiB of a 512-rank log can hold no iteration line, its first chunk 16,000), and a
        multi-node one keeps interleaving set-up blocks with its iterations."""
        self._looks += 1
        head = buf[: 1 << 20] if self._looks == 1 and len(buf) > 1 << 20 else None
        chosen = {i for i, p in enumerate(self.parsers) if i not in self.bulk and p.bulk is not None
                  and ((head is not None and p.bulk_wanted(head)) or p.bulk_wanted(buf))}
        if chosen:
            self.bulk = sorted(chosen.union(self.bulk))
            self._index(set(self.bulk))

    def _feed_bulk(self, buf: bytes, start_no: int) -> None:
        count, cost = buf.count, self.cost
        for i in self.bulk:
            if self.active is not None and i not in self.active:
                continue
            parser, no, at = self.parsers[i], start_no, 0
            began = perf_counter() if cost is not None else 0.0
            try:
                if parser.feed_chunk is not None:   # the reader takes the whole chunk at once
                    parser.feed_chunk(buf, start_no)
                else:
                    feed = parser.feed_bulk
                    for m in parser.bulk.finditer(buf):
                        start = m.start()
                        no += count(b"\n", at, start)
                        at = start
                        feed(no + 1, m)
            except Exception as e:   # one reader's bug must not cost the whole diagnosis
                self._fail(i, e)
            if cost is not None:
                cost[i] += perf_counter() - began
        self.bulk = [i for i in self.bulk if not isinstance(self.parsers[i], _Off)]

    def _claimants(self, found: list[bytes], buf: bytes, ls: int, le: int) -> tuple[int, ...]:
        key = tuple(found)   # (a log repeats its few combinations of literals on thousands of lines)
        got = self._who.get(key)
        if got is None:
            who = tuple(sorted(set().union(*(self.owners[f] for f in set(found)))))
            got = self._who[key] = (who, frozenset(i for i in who if i in self._sel_of))
        who, picky = got
        if picky:   # readers with families: not on a line one of their families selects
            line = buf[ls:le]
            who = tuple(i for i in who if i not in picky or not any(s in line for s in self._sel_of[i]))
        return who

    def _feed_rows(self, buf: bytes, start_no: int) -> None:
        """Each family's rows of this chunk to its reader, before any of the chunk's lines is fed one by one."""
        for rows in self.feeder.rows(buf, start_no, self.active, self.parsers):
            if not len(rows):
                continue
            i = self.feeder.owner[rows.family.name]
            reader = self.parsers[i]
            if isinstance(reader, _Off):
                continue
            began = perf_counter() if self.cost is not None else 0.0
            try:
                reader.feed_rows(rows)
            except Exception as e:   # one reader's bug must not cost the whole diagnosis
                self._fail(i, e)
            if self.cost is not None:
                self.cost[i] += perf_counter() - began

    def _context(self, who: tuple[int, ...]) -> tuple[int, int]:
        """How many lines before and after the line its most demanding reader asks for (each sees its own count)."""
        span = self._span.get(who)
        if span is None:
            span = self._span[who] = (max(self.parsers[i].before for i in who), max(self.parsers[i].after for i in who))
        return span

    def _dispatch(self, hit: Hit, who: tuple[int, ...]) -> None:
        cost = self.cost
        for i in who:
            began = perf_counter() if cost is not None else 0.0
            reader = self.parsers[i]
            hit.view = (reader.before, reader.after)
            try:
                reader.feed(hit)
            except Exception as e:   # one reader's bug must not cost the whole diagnosis
                self._fail(i, e)
            if cost is not None:
                cost[i] += perf_counter() - began

    def _quick(self, i: int, buf: bytes, ls: int, le: int, no: int) -> bool:
        """A line one reader alone wants, offered to that reader's `quick` (a common line read straight from the
        chunk, without a Hit, its cleaning or its neighbour lines); False: dispatch it as usual. Not while an earlier
        line waits for the next chunk, so that each reader still sees its lines in order."""
        quick = getattr(self.parsers[i], "quick", None)   # (a reader switched off has none)
        if quick is None:
            return False
        began = perf_counter() if self.cost is not None else 0.0
        try:
            done = quick(buf, ls, le, no)
        except Exception as e:   # one reader's bug must not cost the whole diagnosis
            self._fail(i, e)
            done = True
        if self.cost is not None:
            self.cost[i] += perf_counter() - began
        return done

    def _fail(self, i: int, e: Exception) -> None:
        name = self.parsers[i].name
        self.failed[name] = f"{type(e).__name__}: {e}"[:200]
        log.warning("reader %s failed and is switched off for this input: %s", name, self.failed[name])
        self.parsers[i] = _Off(name)
        self._span.clear()

    def feed(self, buf: bytes) -> None:
        start_no = self.lines
        if self._looks < BULK_LOOKS and len(self.bulk) < self._bulk_capable:
            self._decide_bulk(buf)
        if self._pending:
            self._fill_pending(buf)
        self._feed_rows(buf, start_no)
        if self.bulk:
            self._feed_bulk(buf, start_no)
        counted_at, no, n = 0, start_no, len(buf)
        if self._shadow:
            self.backend = self._matcher(frozenset(t for t, s in self._shadow.items()
                                                   if (c := buf.count(t)) and c == buf.count(s)))
        for ls, le, first, found in self.backend.lines(buf):
            no += buf.count(b"\n", counted_at, ls)
            counted_at = ls
            who = self._claimants(found, buf, ls, le)
            if not who:   # only readers another process feeds
                continue
            if len(who) == 1 and not self._pending and self._quick(who[0], buf, ls, le, no + 1):
                continue
            raw = clean(buf[ls:le], first - ls)
            cut, label, text = unprefix(raw)
            hit = Hit(no + 1, text, clean=clean_line, cut=cut, label=label, raw=raw)
            nb, na = self._context(who)
            if nb:
                hit._before = self._before(buf, ls, nb)
            need = na
            p = le + 1
            while need and p < n:
                q = buf.find(b"\n", p)
                q = n if q < 0 else q
                hit._after.append(buf[p:q][:MAX_TEXT])
                need -= 1
                p = q + 1
            if need:   # the file or chunk ended first: readers that have what they need get the hit now, in order
                ready = tuple(i for i in who if self.parsers[i].after <= na - need)
                if ready:
                    self._dispatch(hit, ready)
                self._pending.append((hit, tuple(i for i in who if i not in ready), need))
            else:
                self._dispatch(hit, who)
        self.lines = no + buf.count(b"\n", counted_at)   # (the rest of the chunk: one pass over it in all)
        if self.max_before:
            self._remember_tail(buf)

    def skip_lines(self, n: int) -> None:
        """Lines that were not read (the middle of an oversize file): keep the numbering right."""
        self.close()
        self.lines += n
        self._tail.clear()

    def _before(self, buf: bytes, ls: int, k: int) -> tuple[bytes, ...]:
        out: list[bytes] = []
        end = ls - 1
        while len(out) < k and end >= 0:
            s = buf.rfind(b"\n", 0, end) + 1
            out.append(buf[s:end][:MAX_TEXT])
            end = s - 1
        if len(out) < k and self._tail:
            out.extend(reversed(list(self._tail)[-(k - len(out)):]))
        return tuple(reversed(out))

    def _remember_tail(self, buf: bytes) -> None:
        k = self._tail.maxlen or 1
        end = len(buf) - 1 if buf.endswith(b"\n") else len(buf)
        lines: list[bytes] = []
        while len(lines) < k and end >= 0:
            s = buf.rfind(b"\n", 0, end) + 1
            lines.append(buf[s:end][:MAX_TEXT])
            end = s - 1
        self._tail.extend(reversed(lines))

    def _fill_pending(self, buf: bytes) -> None:
        want = max(need for _, _, need in self._pending)
        lines: list[bytes] = []
        p = 0
        while len(lines) < want and p < len(buf):
            q = buf.find(b"\n", p)
            q = len(buf) if q < 0 else q
            lines.append(buf[p:q][:MAX_TEXT])
            p = q + 1
        still = []
        for hit, who, need in self._pending:
            hit._after.extend(lines[:need])
            if len(lines) >= need:
                self._dispatch(hit, who)
            else:
                still.append((hit, who, need - len(lines)))
        self._pending = still

    def close(self) -> None:
        for hit, who, _ in self._pending:
            self._dispatch(hit, who)
        self._pending = []

