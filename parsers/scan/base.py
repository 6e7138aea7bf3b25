"""What every reader of the log shares: the Hit it is fed, the two contracts (Parser: findings; Collector: context),
and small extraction helpers."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterable

import re

import regex

from core.models import Evidence, Finding

MAX_EVIDENCE = 5
RX_TIMEOUT = 0.5  # seconds: a safety net on top of linear patterns, for lines longer than RX_UNTIMED
# A timeout costs two clock reads per search (2.3 µs a search on this VM, more than most searches); on a line this
# short no pattern here can backtrack for long (tests/test_bad_input.py runs every pattern on such lines).
RX_UNTIMED = 256


class Hit:
    """A candidate line (1-based number, cleaned text) with a little context around it. The context lines are
    kept raw and cleaned only when a parser reads them."""
    __slots__ = ("no", "text", "cut", "label", "raw", "_before", "_after", "_after_src", "_clean", "view")

    def __init__(self, no: int, text: str, before=(), after=None, clean=None, cut: str = "", label: str = "",
                 raw: str | None = None):
        # text: the program's own line; label: the launchers' prefixes that say who printed it ("3: [default0]:",
        # "[rank5]:", "[1,5]<stdout>:"); cut: the transport's noise taken off it (quoting, time stamps): unprefix
        self.no, self.text, self.cut, self.label = no, text, cut, label
        self.raw = text if raw is None else raw   # the whole line, prefixes and all (unclaimed error examples)
        self._before, self._after, self._clean = before, after if after is not None else [], clean
        self._after_src: list | None = None   # the lines after as the scanner gave them (raw), once cleaned
        # (before, after): how many neighbour lines the reader being fed asked for. The scanner gathers them for
        # the most demanding reader of the line; each reader sees its own count, whoever else reads the line.
        self.view: tuple[int, int] | None = None

    @property
    def before(self) -> tuple[str, ...]:
        if self._clean and self._before and isinstance(self._before[0], bytes):
            self._before = tuple(self._clean(b) for b in self._before)
        if self.view is not None:
            return tuple(self._before[max(0, len(self._before) - self.view[0]):]) if self.view[0] else ()
        return tuple(self._before)

    @property
    def after(self) -> list[str]:
        if self._clean and any(isinstance(a, bytes) for a in self._after):
            self._after_src = self._after
            self._after = [self._clean(a) if isinstance(a, bytes) else a for a in self._after]
        return self._after if self.view is None else self._after[:self.view[1]]

    @property
    def after_labelled(self) -> list[str]:
        """The lines after with their launcher labels kept: a program's own line can look like one (Horovod's
        '2: [tensor, …]' under 'Missing ranks:' reads as an `srun -l` number)."""
        self.after   # (keeps the raw lines aside)
        src = self._after_src if self._after_src is not None else self._after
        out = [self._clean(a, True) if isinstance(a, bytes) and self._clean else a for a in src]
        return out if self.view is None else out[:self.view[1]]

    def joined(self, n: int = 1) -> str:
        """The line with the next n lines glued on: undoes terminal hard-wrapping mid-token."""
        return self.text + "".join(self.after[:n])


@dataclass
class Context:
    """Facts gathered across the whole log that several parsers and the playbooks need. Collectors fill it before
    any parser finishes."""
    versions: dict[str, str | None] = field(default_factory=dict)
    versions_seen: dict[str, dict[str, tuple[int, str]]] = field(default_factory=dict)  # value -> first (line, text)
    job: dict[str, Any] = field(default_factory=dict)
    hosts: set[str] = field(default_factory=set)
    rank_hosts: dict[int, str] = field(default_factory=dict)  # global rank -> host, from NCCL "comm ... rank N" lines
    world_size: int | None = None
    benchmarks: list[dict[str, Any]] = field(default_factory=list)   # nccl-tests tables, for the weekly report
    error_lines: list[dict[str, Any]] = field(default_factory=list)  # error-looking line templates, most frequent first
    step_series: list[Any] = field(default_factory=list)   # parsers.step_series.StepSeries, one per log format
    throughput: dict[str, Any] = field(default_factory=dict)   # MFU / TFLOP/s per GPU as logged, symptom or not
    notes: list[str] = field(default_factory=list)   # what a reader has to say about how it read (into input.notes)


class Reader:
    """What the scanner feeds. The contract (issue 33):

    - `families`: line families (parsers.scan.rows.Family): literals that select lines, and named fields, each a
      pattern with one group in the regex subset Rust `regex` and Python `regex` read alike. The engine extracts
      them (natively for a big chunk, parsers/scan/native.py; in Python for a paste, parsers/scan/rows.py; the same
      rows either way, tests/test_feeders.py) and calls `feed_rows(rows)` once per family and chunk, in line order,
      before that chunk's Hits: `rows.no`, `rows.get(field)` (text or None), `rows.text` (the whole line where the
      family asks, or where a field named in `need` is missing: read such a row with `parsers.scan.scanner.hit_of`), and
      `rows.count` (with `distinct`, the copies of a row that follow it, dropped in the engine). A line one of the
      reader's families selects never reaches its `feed`.
    - `triggers`: literals for the rare lines read one by one; `feed(hit)` gets each line holding one (and no
      selector of the reader's families) as a Hit, with `before`/`after` lines of context.
    - `finish(ctx)` (Parser) or `collect(ctx)` (Collector) once at the end.

    Being retired (issue 33): the loss reader still reads its dominant line format chunk-wide: `bulk` is a bytes regex run over whole chunks while
    `bulk_wanted` (judged chunk by chunk) holds, and then only `bulk_triggers` are read line by line. The matches
    go to `feed_bulk` one by one, or the whole chunk to `feed_chunk` where a reader defines it. A line that only this
    reader wants is first offered to `quick(buf, line start, line end, line number)`, where a reader defines it: True
    when it took the line straight from the chunk exactly as `feed` would have, False to be fed a Hit as usual."""
    name: ClassVar[str]
    triggers: ClassVar[tuple[str, ...]]
    before: ClassVar[int] = 0
    after: ClassVar[int] = 0
    bulk: ClassVar[Any] = None
    bulk_triggers: ClassVar[tuple[str, ...]] = ()
    feed_chunk: Any = None   # (buf, first line number - 1): set by a reader that takes a whole chunk in one go
    quick: Any = None        # (buf, start, end, line number) -> bool: set by a reader with a fast path for its lines
    # Line families (parsers.scan.rows.Family): the lines they select reach this reader only as rows, in batches
    families: ClassVar[tuple[Any, ...]] = ()

    def feed_rows(self, rows) -> None:
        """A batch of one of its families' rows (parsers.scan.rows.Rows), in line order, before the chunk's Hits."""
        raise NotImplementedError

    def wants_rows(self, family) -> bool:
        """Whether this family's rows can still change what the reader says (False: they are not read; the lines
        the family selects still never reach `feed`)."""
        return True

    @classmethod
    def bulk_wanted(cls, sample: bytes) -> bool:
        return False

    def feed_bulk(self, no: int, match) -> None:
        raise NotImplementedError

    def feed(self, hit: Hit) -> None:
        raise NotImplementedError


class Parser(Reader):
    """One symptom family's detector: fed candidate lines, then asked once for its findings.

    `Options` is the type of the settings a parser takes (a frozen dataclass with defaults), or None; the engine
    passes the team's instance when there is one and the defaults otherwise."""
    Options: ClassVar[type | None] = None

    def __init__(self) -> None:
        self.ev = EvidenceBox()

    def seen(self) -> bool:
        """Whether evidence of its symptom has been read so far (progress lines)."""
        return self.ev.total > 0

    def finish(self, ctx: Context) -> list[Finding]:
        raise NotImplementedError


class Collector(Reader):
    """Finds no symptom: reads what the log says about the job (versions, settings, hosts, benchmark tables, error
    lines) into the Context, before any parser finishes."""

    def collect(self, ctx: Context) -> None:
        raise NotImplementedError


class EvidenceBox:
    """Bounded evidence: the first few lines plus a count of the rest."""

    def __init__(self, limit: int = MAX_EVIDENCE):
        self.limit = limit
        self.items: list[Evidence] = []
        self.seen_lines: set[int] = set()
        self.total = 0

    def add(self, no: int, text: str) -> None:
        self.total += 1
        if len(self.items) < self.limit and no not in self.seen_lines:
            self.seen_lines.add(no)
            self.items.append(Evidence(line=no, text=text.strip()[:500]))

    def hit(self, hit: "Hit", text: str | None = None) -> None:
        """A line read from the log as evidence: the program's own line (Hit.text, without the transport's and the
        launchers' prefixes, as every reader sees it), or another text the reader shows for it (a wrapped line
        glued back together)."""
        self.add(hit.no, hit.text if text is None else text)

    def first(self) -> int:
        return min((e.line for e in self.items), default=0)


class rx:
    """A `regex` pattern compiled on first use: a short paste only pays for the parsers it wakes up.

    `needs`: fixed text of which every match holds at least one (`fold`: compared lower-cased). `search` and
    `findall` skip a line without any of it — a substring test instead of a regex run on most lines."""
    __slots__ = ("source", "flags", "_compiled", "needs", "fold")

    def __init__(self, pattern: str, flags: int = 0, needs: tuple[str, ...] = (), fold: bool = False):
        self.source, self.flags, self._compiled = pattern, flags, None
        self.needs, self.fold = needs, fold

    def admits(self, text: str) -> bool:
        if not self.needs:
            return True
        t = text.lower() if self.fold else text
        return any(map(t.__contains__, self.needs))   # (half the cost of a generator: it runs ~14 times a line)

    @property
    def compiled(self) -> regex.Pattern:
        if self._compiled is None:
            # (?-f): simple case folding. Full folding (VERSION1's default) lets "ff" match the ligature "ﬀ", and a
            # run of f's under (?i) then backtracks exponentially: 1.4 s for 32 characters of "0xfff…" (found by
            # tests/test_bad_input.py)
            self._compiled = regex.compile("(?-f)" + self.source, self.flags | regex.VERSION1)
        return self._compiled


def search(pattern: rx, text: str):
    if not pattern.admits(text):
        return None
    if len(text) <= RX_UNTIMED:
        return pattern.compiled.search(text)
    try:
        return pattern.compiled.search(text, timeout=RX_TIMEOUT)
    except TimeoutError:
        return None


def findall(pattern: rx, text: str):
    if not pattern.admits(text):
        return []
    if len(text) <= RX_UNTIMED:
        return list(pattern.compiled.finditer(text))
    try:
        return list(pattern.compiled.finditer(text, timeout=RX_TIMEOUT))
    except TimeoutError:
        return []


_UNITS = {"b": 1 / 2**30, "kib": 1 / 2**20, "kb": 1 / 2**20, "mib": 1 / 1024, "mb": 1 / 1024,
          "gib": 1.0, "gb": 1.0, "tib": 1024.0, "tb": 1024.0}


def to_gib(value: str, unit: str) -> float:
    return round(float(value) * _UNITS[unit.lower()], 2)


# Launcher prefixes in front of a program's own line, outermost first: srun -l task labels ("12: "), "[host:N]:"
# labels, mpirun's "[1,12]<stdout>:", Ray actors ("(RayTrainWorker pid=41, ip=10.0.0.5) "), docker/k8s "host
# [stdout] ", and torchrun's "[defaultN]:" (local rank) and "[rankN]:" (global rank).
LAUNCHER_PREFIX = rx(r"^(?:\s*(?:\d{1,5}: |\[[\w.-]+:\d+\]: ?|\[1,\d+\]<std\w+>: ?|\([\w.-]+ pid=\d+(?:, ip=[\d.]+)?\) "
                     r"|\S+ \[std(?:out|err)\]\s+|\[(?:default|rank)\d+\]: ?))+")
_GLOBAL_RANK = rx(r"\[rank(\d{1,6})\](?::|\s)|\[1,(\d{1,6})\]<std|\[Rank (\d{1,6})\]|\bRank (\d{1,6})\]"
                  r"|\brank[ =:]+(\d{1,6})\b")
_LOCAL_RANK = rx(r"^\s*(\d{1,5}: |\[[\w.-]+:\d{1,6}\]: ?)?(?:\S+ \[std(?:out|err)\]\s+)?\[default(\d{1,6})\]:")


def strip_prefixes(text: str) -> str:
    """The line as the program printed it, without the launchers' prefixes. Lines the scanner feeds to readers have
    had them taken off already (unprefix): this is for text that did not come through it."""
    if not text or text[0] not in "[( 0123456789" and " [std" not in text[:80]:
        return text
    m = search(LAUNCHER_PREFIX, text)
    return text[m.end():] if m else text


# What a log's transport puts in front of a line and no reader needs inside it: paste quoting ("> "), a leading
# timestamp (ISO 8601 / RFC 3339 with or without brackets, CloudWatch's tab, the CRI log format of Kubernetes nodes:
# "<time> stdout F "), and a syslog/journal header ("Mar  4 12:00:07 host prog[pid]: "). Launcher prefixes that
# carry identity (srun -l, [rankN]:, [1,N]<stdout>:, Ray actors) are kept; a noise prefix after one is cut as well.
_STAMP = (r"[ \t]*\[?\d{4}-\d\d-\d\d[T _]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z| ?[+-]\d\d:?\d\d| ?UTC)?\]?"
          r"(?:\s+std(?:out|err) [PF])?(?:[ \t]+|(?=\[))")
_SYSLOG = r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d [\w.-]+ [\w./@-]+(?:\[\d+\])?: "
_NOISE = re.compile(r"(?:[ \t]*>+[ \t]?|" + _STAMP + "|" + _SYSLOG + ")+")
_IDENTITY = re.compile(LAUNCHER_PREFIX.source.removeprefix("^"))


def unprefix(text: str) -> tuple[str, str, str]:
    """(the noise prefixes cut, the identity prefixes in their order, the program's own line)."""
    if not text or (text[0] not in ">[ \t0123456789(" and not ("A" <= text[0] <= "Z" and text[3:4] == " ")
                    and " [std" not in text[:80]):
        return "", "", text
    kept, cut, pos = [], [], 0
    while True:
        m = _NOISE.match(text, pos)
        if m and m.end() > pos:
            cut.append(text[pos:m.end()])
            pos = m.end()
            continue
        m = _IDENTITY.match(text, pos)
        if m and m.end() > pos:
            kept.append(text[pos:m.end()])
            pos = m.end()
            continue
        break
    return "".join(cut), "".join(kept), text[pos:]


def rank_of(text: str) -> int | None:
    """The global rank a line speaks for: torchrun's [rankN], mpirun's [1,N], or the rank the message names.
    torchrun's [defaultN] is the local rank: it stands for the global one only when no node label (srun -l,
    [host:N]) says the log holds several nodes."""
    if "ank" in text or "<std" in text:
        m = search(_GLOBAL_RANK, text)
        if m:
            return int(next(g for g in m.groups() if g is not None))
    if "[default" in text:
        m = search(_LOCAL_RANK, text)
        if m and not m.group(1):
            return int(m.group(2))
    return None


HOST_PREFIX = rx(r"^(?:\S+:\s+)*(?:\[\d+,\d+\]<std\w+>:)?([A-Za-z0-9][\w.-]*):(\d+):(\d+) \[(\d+)\]")


_HOST_MEMO: tuple[str | None, str | None] = (None, None)   # (the last line asked about, its host)


def host_of(text: str) -> str | None:
    """The host a line's NCCL prefix names. Several parsers ask about the same line object in a row: the answer
    for the last one is kept (one tuple, replaced whole, so concurrent diagnoses never see a mixed pair)."""
    global _HOST_MEMO
    last, host = _HOST_MEMO
    if text is last:
        return host
    m = search(HOST_PREFIX, text)
    host = m.group(1) if m else None
    _HOST_MEMO = (text, host)
    return host


def parse_options(cls: type, text: str) -> Any:
    """"key=value,key=value" into a parser's Options dataclass. Every value is a positive number, a whole one for
    int fields; the dataclass checks how values go together. Raises ValueError naming the key."""
    import dataclasses
    kinds = {f.name: f.type for f in dataclasses.fields(cls)}
    values: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, raw = (x.strip() for x in part.partition("="))
        if not sep or key not in kinds:
            raise ValueError(f"{part!r}: use KEY=VALUE with KEY one of {', '.join(kinds)}")
        try:
            num = float(raw)
        except ValueError:
            raise ValueError(f"{key}: {raw!r} is not a number") from None
        whole = kinds[key] in (int, "int")
        if num <= 0 or not num < float("inf") or (whole and not num.is_integer()):
            raise ValueError(f"{key} must be a positive {'whole number' if whole else 'number'}")
        values[key] = int(num) if whole else num
    return cls(**values)


def ranks_text(ranks: Iterable[int], limit: int = 12) -> str:
    rs = sorted(set(ranks))
    shown = ", ".join(map(str, rs[:limit]))
    return shown + (f" and {len(rs) - limit} more" if len(rs) > limit else "")
