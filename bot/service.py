"""What every interface does with an input: diagnose it, store it, hand back the diagnosis and its id; and whether
today's engine recognises a line (the weekly report and `triage rules new` ask)."""
from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass
from typing import Any

from bot.store.store import Store
from core.ingest import UnusableInput, from_bytes
from core.inputs import Joined, expand
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

    def run_all(self, data: bytes, name: str, lang: str = "en", keep_empty: bool = True, **meta: str):
        """Like run, for every member when the data is an archive: yields (name, diagnosis or None, id, error).
        With keep_empty=False a diagnosis without findings is neither stored nor reported (chat, not a log)."""
        notes: list[str] = []
        for src in expand(from_bytes(data, name, self.max_bytes), notes):
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

    def run_together(self, inputs: list[tuple[str, bytes]], name: str, lang: str = "en",
                     **meta: str) -> tuple[Diagnosis, int | None]:
        """Several inputs of one job read as one log (`@triage together`): one diagnosis, stored once. Raises
        core.ingest.UnusableInput when none of them can be read."""
        joined = Joined(name, [lambda n=n, b=b: expand(from_bytes(b, n, self.max_bytes)) for n, b in inputs])
        d = self.engine.diagnose(joined, lang)
        return d, self.record(d, b"\0".join(b for _, b in inputs), **meta)

    def record(self, d: Diagnosis, data: bytes | None, **meta: str) -> int | None:
        """Store the diagnosis; when the database cannot take it (disk full, locked, damaged) the asker still gets
        the answer, with a note that it was not stored, and the failure is logged."""
        if self.store is None:
            return None
        try:
            return self.store.record(d, data, **meta)
        except sqlite3.Error as e:
            log.error("diagnosis not stored: %s", e)
            d.input.notes.append(f"this diagnosis could not be stored ({e}); tell the bot's operator")
            return None


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
