"""What every interface does with an input: diagnose it, store it, hand back the diagnosis and its id; and whether
today's engine recognises a line (the weekly report and `triage rules new` ask)."""
from __future__ import annotations

import hashlib
import logging
import sqlite3
from dataclasses import dataclass
from typing import Any

from bot.store.store import Store
from core.ingest import UnusableInput, from_bytes
from core.inputs import Joined, expand, open_path
from core.models import Diagnosis
from engine import Engine
from knowledge.runbook import Runbook


log = logging.getLogger("triage.service")


@dataclass
class Triage:
    engine: Engine
    runbook: Runbook
    store: Store | None = None
    max_bytes: int = 4 << 30
    phraser: Any = None  # bot.answer.llm.Phraser when TRIAGE_LLM is set

    def _source(self, data: bytes | str, name: str):
        """Bytes in memory, or a file on disk given by its path (read as a stream)."""
        return from_bytes(data, name, self.max_bytes) if isinstance(data, bytes) else open_path(data, self.max_bytes, name)

    def run_all(self, data: bytes | str, name: str, lang: str = "en", keep_empty: bool = True, **meta: str):
        """Like run, for every member when the data is an archive: yields (name, diagnosis or None, id, error).
        With keep_empty=False a diagnosis without findings is neither stored nor reported (chat, not a log).
        `data`: the bytes, or the path of a file on disk."""
        notes: list[str] = []
        for src in expand(self._source(data, name), notes):
            try:
                d = self.engine.diagnose(src, lang)
            except UnusableInput as e:
                if keep_empty:
                    yield src.name, None, None, str(e)
                continue
            if not d.findings and not keep_empty:
                continue
            yield src.name, d, self.record(d, data, **meta), ""
        for note in notes:   # what the archive as a whole says, reported like a skipped input
            yield name, None, None, note

    def run(self, data: bytes, name: str, lang: str = "en", **meta: str) -> tuple[Diagnosis, int | None]:
        """Raises core.ingest.UnusableInput for input that is not a log. The diagnosis is committed to the store
        (when there is one) before this returns, so an answer that fails to post loses nothing."""
        d = self.engine.diagnose(from_bytes(data, name, self.max_bytes), lang)
        return d, self.record(d, data, **meta)

    def run_together(self, inputs: list[tuple[str, bytes | str]], name: str, lang: str = "en",
                     **meta: str) -> tuple[Diagnosis, int | None]:
        """Several inputs of one job read as one log (`@triage together`): one diagnosis, stored once. Raises
        core.ingest.UnusableInput when none of them can be read. Each input: bytes, or a file's path."""
        joined = Joined(name, [lambda n=n, b=b: expand(self._source(b, n)) for n, b in inputs])
        d = self.engine.diagnose(joined, lang)
        return d, self.record(d, [b for _, b in inputs], **meta)

    def record(self, d: Diagnosis, data: bytes | str | list | None, **meta: str) -> int | None:
        """Store the diagnosis; when the database cannot take it (disk full, locked, damaged) the asker still gets
        the answer, with a note that it was not stored, and the failure is logged."""
        if self.store is None:
            return None
        try:
            return self.store.record(d, input_digest(data) if data is not None else None, **meta)
        except sqlite3.Error as e:
            log.error("diagnosis not stored: %s", e)
            d.input.notes.append(f"this diagnosis could not be stored ({e}); tell the bot's operator")
            return None


def input_digest(data: bytes | str | list) -> str:
    """sha256 of what was diagnosed: bytes, a file on disk (by its path, read in 1 MiB blocks) or several of them
    joined by NUL bytes (a `together` diagnosis)."""
    h = hashlib.sha256()
    for i, part in enumerate(data if isinstance(data, list) else [data]):
        if i:
            h.update(b"\0")
        if isinstance(part, bytes):
            h.update(part)
            continue
        try:
            with open(part, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        except OSError:
            h.update(part.encode())   # gone already: the digest still names what it was
    return h.hexdigest()


def recognised(engine, line: str) -> str | None:
    """The symptom today's engine finds in this one line alone, or None: an 'unrecognised' line recorded before a
    parser or rule learnt it is not unrecognised any more."""
    from core.ingest import from_bytes
    try:
        d = engine.diagnose(from_bytes(line.encode("utf-8", "replace") + b"\n", "line"))
    except Exception:   # (an unusable line: nothing claims it)
        return None
    return d.findings[0].symptom if d.findings else None


def builtin_engine():
    """The engine with the built-in playbooks and readers only (no settings needed)."""
    from engine import Engine
    from playbooks.engine import load
    return Engine(load())
