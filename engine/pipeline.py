"""The pure core every interface calls: a source in, a Diagnosis out (scan → collectors → parsers → root cause →
playbooks). Everything it needs comes in as arguments; it reads no environment."""
from __future__ import annotations

import logging
from itertools import islice
from pathlib import Path
from time import perf_counter
from dataclasses import asdict, dataclass
from typing import Any, Callable, Sequence

from core.ingest import Source
from core.inputs import Joined
from core.models import Diagnosis, Finding, InputInfo
from core.redact import mask_secrets
from core.versions import REPORTED
from core.templates import unexplained
import engine.split as split
from engine.causes import order
from parsers import READERS
from parsers.scan.base import Context, Parser
from parsers.scan.scanner import Scanner
from parsers.step_series import pick as step_time
from parsers.team import TeamRules
from playbooks import engine as playbooks

log = logging.getLogger("triage.engine")



def _masked(v):
    if isinstance(v, str):
        return mask_secrets(v)
    if isinstance(v, list):
        return [_masked(x) for x in v]
    if isinstance(v, dict):
        return {k: _masked(x) for k, x in v.items()}
    return v


def _mask(f: Finding) -> None:
    """Secrets never leave the engine: evidence, titles and facts are masked once, here (bounded data)."""
    f.title = mask_secrets(f.title)
    for e in f.evidence:
        e.text = mask_secrets(e.text)
    f.facts = _masked(f.facts)


def _guarded(failed: dict[str, str], name: str, call: Callable, *args):
    """A reader's collect/finish; a bug in one reader is recorded in `failed` instead of ending the diagnosis."""
    try:
        return call(*args)
    except Exception as e:
        failed[name] = f"{type(e).__name__}: {e}"[:200]
        log.warning("reader %s failed and was skipped: %s", name, failed[name])
        return None


@dataclass(frozen=True)
class Engine:
    """The validated playbooks, the parsers' options (instances of their declared `Options` types: the team's
    loss-spike thresholds), the scanner backend ('auto', 'hyperscan', 'ahocorasick' or 're') and its cache directory."""
    books: Sequence[playbooks.Book]
    options: tuple[Any, ...] = ()
    backend: str = "auto"
    cache: Path | None = None   # a directory the scanner may keep its compiled matcher in
    feeder: str = "auto"        # line families: "python", "polars" (native), or by chunk size (parsers/scan.py)

    @property
    def rules(self) -> tuple[dict[str, Any], ...]:
        """The teams' detection rules, loaded with the playbooks (playbooks.engine.Books)."""
        return getattr(self.books, "rules", ())

    def _readers(self) -> list:
        given = {type(o): o for o in self.options}
        readers = [cls(given[cls.Options]) if issubclass(cls, Parser) and cls.Options in given else cls()
                   for cls in READERS]
        return readers + [TeamRules(self.rules)] if self.rules else readers

    def diagnose(self, source: Source | Joined, lang: str = "en",
                 progress: Callable[[int, int], None] | None = None, jobs: int = 1) -> Diagnosis:
        """Read the whole source once, in chunks. Raises core.ingest.UnusableInput for input that is not a log.
        `progress(bytes_read, symptom_families_seen_so_far)` is called after every chunk when given. `jobs` > 1:
        the readers are shared out over up to that many processes after the first chunk (engine.split; the same
        answer, sooner on a big log)."""
        readers = self._readers()
        parsers = [r for r in readers if isinstance(r, Parser)]
        scanner = Scanner(readers, self.backend, self.cache, self.feeder)
        chunks = source.chunks()
        workers: list[split.Worker] = []
        try:
            if jobs > 1 and split.available() and split.rereadable(getattr(source, "stream", None)):
                scanner.cost = [0.0] * len(readers)
                began = perf_counter()
                last = self._read(scanner, islice(chunks, 1), source, progress, parsers)
                workers = self._fork(scanner, chunks, jobs, perf_counter() - began)
            else:
                last = b""
            last = self._read(scanner, chunks, source, progress, parsers) or last
            scanner.close()
            split.finish(workers, readers, scanner.failed)
        finally:
            split.stop(workers)
        failed = scanner.failed
        ctx = Context()
        for r in readers:
            if not isinstance(r, Parser) and r.name not in failed:
                _guarded(failed, r.name, r.collect, ctx)
        found = [_guarded(failed, p.name, p.finish, ctx) or [] for p in readers
                 if isinstance(p, Parser) and p.name not in failed]
        findings = order([f for fs in found for f in fs])
        lines = scanner.lines + (1 if last and last != b"\n" else 0)
        for name in failed:   # say so: the answer may lack what that reader would have found
            source.notes.append(f"the {name} reader failed on this input and was skipped; please report it")
        source.notes.extend(ctx.notes)
        return self._assemble(source, ctx, findings, lines, lang)

    @staticmethod
    def _read(scanner: Scanner, chunks, source, progress, parsers) -> bytes:
        """Feed chunks to the scanner; the last byte read (b"" for none)."""
        last = b""
        for chunk in chunks:
            if isinstance(chunk, int):
                scanner.skip_lines(chunk)
                continue
            scanner.feed(chunk)
            last = chunk[-1:]
            if progress is not None:
                progress(source.bytes_read, sum(1 for p in parsers if p.seen()))
        return last

    def _fork(self, scanner: Scanner, chunks, jobs: int, took: float) -> list[split.Worker]:
        """After the first chunk: the readers' shares; workers for all but the first, which this process keeps."""
        cost, scanner.cost = scanner.cost or [], None
        shares = split.partition(cost, max(0.0, took - sum(cost)), jobs)
        if len(shares) < 2:
            return []

        def work(share: list[int]) -> bytes:
            scanner.restrict(frozenset(share))
            self._read(scanner, chunks, None, None, ())
            scanner.close()
            mine = {i: scanner.parsers[i] for i in share if scanner.parsers[i].name not in scanner.failed}
            return split.answer(mine, scanner.failed)

        workers = split.start(shares[1:], work)
        scanner.restrict(frozenset(shares[0]))
        return workers

    def _assemble(self, source: Source | Joined, ctx: Context, findings: list[Finding], lines: int,
                  lang: str) -> Diagnosis:
        unclaimed = unexplained(ctx.error_lines, (e.text for f in findings for e in f.evidence))
        versions = {k: ctx.versions.get(k) for k in REPORTED}
        job = dict(ctx.job)
        if ctx.world_size:
            job.setdefault("world_size", ctx.world_size)
        if ctx.hosts:
            job["hosts"] = sorted(ctx.hosts)[:64]
        where = getattr(source, "where", None)   # core.inputs.Joined: several files read as one
        for f in findings:
            _mask(f)
            if where is not None:
                for e in f.evidence:
                    e.source = where(e.line)
            f.steps = playbooks.steps_for(f, ctx.versions, job, self.books, lang)
        for u in unclaimed:
            u["example"], u["template"] = mask_secrets(u["example"]), mask_secrets(u["template"])
        info = InputInfo(name=source.name, bytes=source.bytes_read, lines=lines, truncated=source.truncated,
                         notes=list(source.notes), parts=[asdict(p) for p in getattr(source, "parts", ())])
        return Diagnosis(input=info, versions=versions, job=job, findings=findings, benchmarks=ctx.benchmarks,
                         unclaimed=unclaimed, step_time={**(step_time(ctx.step_series) or {}), **ctx.throughput})
