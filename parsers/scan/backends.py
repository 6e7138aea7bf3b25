"""The scanner's candidate-line search: every line holding one of the readers' trigger literals, as (line start,
line end, where the first match starts, the literals found). Three interchangeable backends: Hyperscan (Vectorscan on
ARM), pyahocorasick (C; for machines without a Hyperscan wheel) and pure Python; the same lines from each (tested)."""
from __future__ import annotations

import os
import re
from pathlib import Path


def _trie_regex(words: list[bytes]) -> bytes:
    """An alternation factored by common prefixes: the regex engine tries far fewer branches per position.
    Longer literals win over their prefixes, as in a longest-first alternation."""
    trie: dict = {}
    for w in words:
        node = trie
        for b in w:
            node = node.setdefault(b, {})
        node[None] = True

    def build(node: dict) -> bytes:
        alts = [re.escape(bytes([b])) + build(child) for b, child in sorted(
            ((k, v) for k, v in node.items() if k is not None), key=lambda kv: kv[0])]
        if not alts:
            return b""
        body = alts[0] if len(alts) == 1 else b"(?:" + b"|".join(alts) + b")"
        return b"(?:" + body + b")?" if None in node else body

    return build(trie)


class _ReBackend:
    """Pure-Python candidate search: one trie-factored regex over the chunk, one findall per candidate line."""
    name = "re"

    def __init__(self, literals: list[bytes]):
        self.pattern = re.compile(_trie_regex(literals))

    def lines(self, buf: bytes):
        """(line start, line end, first match offset, literals found) for every candidate line, in order."""
        search, findall, n, pos = self.pattern.search, self.pattern.findall, len(buf), 0
        while True:
            m = search(buf, pos)
            if not m:
                return
            ls = buf.rfind(b"\n", 0, m.start()) + 1
            le = buf.find(b"\n", m.end())
            le = n if le < 0 else le
            yield ls, le, m.start(), findall(buf, ls, le)
            pos = le + 1
            if pos >= n:
                return


_HS_DATABASES: dict[tuple[bytes, ...], object] = {}   # trigger literals -> compiled database (read-only, shared)


class _HyperscanBackend:
    """Hyperscan's multi-literal matcher (grep-class speed); matches are grouped into lines afterwards."""
    name = "hyperscan"

    def __init__(self, literals: list[bytes], cache: Path | None = None):
        import hyperscan
        self.literals = literals
        self.db = _HS_DATABASES.get(key := tuple(literals))
        if self.db is None:   # once per trigger set in a process (a bot answers many diagnoses)
            self.db = _hs_database(literals, cache)
            if len(_HS_DATABASES) >= 16:
                _HS_DATABASES.clear()
            _HS_DATABASES[key] = self.db
        self.scratch = hyperscan.Scratch(self.db)   # per scanner: a scratch serves one scan at a time

    def lines(self, buf: bytes):
        hits: list[tuple[int, int]] = []
        self.db.scan(buf, match_event_handler=lambda i, f, to, fl, c: hits.append((to, i)), scratch=self.scratch)
        hits.sort()
        return _group(buf, hits, self.literals)


def _hs_database(literals: list[bytes], cache: Path | None):
    """The compiled database (70-100 ms here, most of a short paste's time in a fresh process), kept in `cache` keyed
    by the literals, Hyperscan's version and the machine. A file that does not load on this host (another CPU, a
    damaged file) is compiled again and replaced; an unwritable cache only costs the compile."""
    import hyperscan
    path = None
    if cache is not None:
        import hashlib
        import platform
        tag = f"{getattr(hyperscan, '__version__', '?')} {platform.machine()}".encode()
        path = cache / (hashlib.sha256(b"\0".join([tag, *literals])).hexdigest()[:32] + ".hsdb")
        try:
            return hyperscan.loadb(path.read_bytes(), hyperscan.HS_MODE_BLOCK)
        except Exception:
            pass
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=literals, ids=list(range(len(literals))), elements=len(literals),
               flags=[0] * len(literals), literal=True)
    if path is not None:
        try:
            cache.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_bytes(hyperscan.dumpb(db))
            os.replace(tmp, path)
        except OSError:
            pass
    return db


def _group(buf: bytes, hits: list[tuple[int, int]], lits: list[bytes]):
    """Every occurrence of every literal, as (end offset, literal index) sorted, grouped into candidate lines: (line
    start, line end, where the first match starts, the literals found)."""
    n, le = len(buf), -1
    found: list[bytes] = []
    ls = first = 0
    for to, i in hits:
        if to > le:
            if found:
                yield ls, le, first, found
            first = to - len(lits[i])
            ls = buf.rfind(b"\n", 0, first) + 1
            le = buf.find(b"\n", to)
            le = n if le < 0 else le
            found = []
        found.append(lits[i])
    if found:
        yield ls, le, first, found


class _AhoCorasickBackend:
    """pyahocorasick's automaton (C, wheels for more machines than Hyperscan's): every occurrence of every
    literal, as Hyperscan reports them, grouped into the same lines with the same first match."""
    name = "ahocorasick"

    def __init__(self, literals: list[bytes]):
        import ahocorasick
        self.literals = literals
        self.automaton = ahocorasick.Automaton()
        for i, lit in enumerate(literals):   # latin-1: one character per byte, so offsets are byte offsets
            self.automaton.add_word(lit.decode("latin-1"), i)
        self.automaton.make_automaton()

    def lines(self, buf: bytes):
        hits = [(end + 1, i) for end, i in self.automaton.iter(buf.decode("latin-1"))]
        hits.sort()   # by end, then literal, as Hyperscan's are (already in end order: a cheap sort)
        return _group(buf, hits, self.literals)


_PRESENCE: dict[tuple[bytes, ...], object] = {}   # literals -> a single-match database (read-only, shared)


def presence(literals: tuple[bytes, ...]):
    """A function: chunk -> the set of these literals it holds. One Hyperscan pass reporting each literal at most
    once (a handful of literals: CPython's `in` takes a full pass, 3-6 ms of an 8 MiB chunk, for each one absent);
    `in` for each where Hyperscan is not installed."""
    try:
        import hyperscan
    except ImportError:
        return lambda buf: {x for x in literals if x in buf}
    db = _PRESENCE.get(literals)
    if db is None:
        db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
        db.compile(expressions=list(literals), ids=list(range(len(literals))), elements=len(literals),
                   flags=[hyperscan.HS_FLAG_SINGLEMATCH] * len(literals), literal=True)
        _PRESENCE[literals] = db
    scratch = hyperscan.Scratch(db)

    def found(buf: bytes) -> set[bytes]:
        out: set[bytes] = set()
        db.scan(buf, match_event_handler=lambda i, f, to, fl, c: out.add(literals[i]), scratch=scratch)
        return out
    return found


BACKENDS = ("auto", "hyperscan", "ahocorasick", "re")
_NATIVE = {"hyperscan": _HyperscanBackend, "ahocorasick": _AhoCorasickBackend}


def make_backend(literals: list[bytes], prefer: str = "auto", cache: Path | None = None):
    """The backend asked for; by default hyperscan, else pyahocorasick, whichever is installed, else pure Python.
    `cache`: a directory for Hyperscan's compiled database."""
    if prefer not in BACKENDS:
        raise ValueError(f"scanner backend must be one of {', '.join(BACKENDS)}, not {prefer!r}")
    for name in (("hyperscan", "ahocorasick") if prefer == "auto" else (prefer,) if prefer in _NATIVE else ()):
        try:
            return _HyperscanBackend(literals, cache) if name == "hyperscan" else _NATIVE[name](literals)
        except ImportError:
            if prefer != "auto":
                raise
    return _ReBackend(literals)
