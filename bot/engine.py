"""The pure core every interface calls: bytes in, a Diagnosis out (ingest → parsers → root cause → playbooks)."""
from __future__ import annotations

from dataclasses import asdict
from typing import Any, Callable, Mapping

from core.ingest import Source
from core.inputs import Joined
from core.redact import mask_secrets
from core.models import Diagnosis, Finding, InputInfo
from parsers import PARSERS
from parsers.base import Context
from parsers.scan import Scanner, collect
from playbooks import engine as playbooks

# Lower rank = more likely to be the initiating failure. Hardware first, then software that crashes a rank,
# then the transport, then the collective that times out waiting for all of the above.
CAUSAL_RANK = {
    "gpu_xid": 0, "nvlink_inactive": 1, "version_mismatch": 2, "cuda_oom": 3, "efa_provider_missing": 4,
    "efa_mr_registration": 5, "fork_enomem": 6, "nccl_error": 7, "tcp_fallback": 8, "nccl_timeout": 9,
    "loss_nan": 10, "loss_spike": 11, "moe_imbalance": 12,
}
# symptom -> symptoms that can cause it (the earliest-ranked present one is named in caused_by)
CAUSES = {
    "nccl_timeout": ("gpu_xid", "nvlink_inactive", "version_mismatch", "cuda_oom", "efa_provider_missing",
                     "efa_mr_registration", "fork_enomem", "nccl_error"),
    "nccl_error": ("gpu_xid", "nvlink_inactive", "version_mismatch", "cuda_oom", "efa_mr_registration",
                   "efa_provider_missing"),
    "tcp_fallback": ("efa_provider_missing", "version_mismatch"),
}


def order(findings: list[Finding]) -> list[Finding]:
    """Root cause first; consequences name their cause."""
    present = {f.symptom for f in findings}
    for f in findings:
        if f.caused_by is None:
            cause = next((c for c in CAUSES.get(f.symptom, ()) if c in present), None)
            f.caused_by = cause
    return sorted(findings, key=lambda f: (f.caused_by is not None, CAUSAL_RANK.get(f.symptom, 99), f.first_line))


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


def diagnose(source: Source | Joined, books: list[playbooks.Book] | None = None, lang: str = "en",
             progress: Callable[[int, int], None] | None = None,
             options: Mapping[str, Mapping[str, Any]] | None = None) -> Diagnosis:
    """Read the whole source once, in chunks. Raises core.ingest.UnusableInput for input that is not a log.
    `progress(bytes_read, symptoms_seen_so_far)` is called after every chunk when given. `options` maps a parser's
    name to its keyword arguments (Settings.parser_options(): the team's loss-spike thresholds)."""
    books = playbooks.load_from_env() if books is None else books
    options = options or {}
    parsers = [cls(**options.get(cls.name, {})) for cls in PARSERS]
    scanner = Scanner(parsers)
    last = b""
    for chunk in source.chunks():
        if isinstance(chunk, int):
            scanner.skip_lines(chunk)
            continue
        scanner.feed(chunk)
        last = chunk[-1:]
        if progress is not None:
            progress(source.bytes_read, sum(1 for p in parsers if getattr(getattr(p, "ev", None), "total", 0)))
    scanner.close()
    ctx = Context()
    findings = order(collect(parsers, ctx))
    for p in parsers:
        if hasattr(p, "claim"):
            p.claim(findings, ctx)
    versions = {k: ctx.versions.get(k) for k in ("nccl", "cuda", "torch", "aws_ofi_nccl", "libfabric",
                                                  "efa_installer", "driver")}
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
        f.steps = playbooks.steps_for(f, ctx.versions, job, books, lang)
    for u in ctx.unclaimed:
        u["example"], u["template"] = mask_secrets(u["example"]), mask_secrets(u["template"])
    lines = scanner.lines + (1 if last and last != b"\n" else 0)
    info = InputInfo(name=source.name, bytes=source.bytes_read, lines=lines, truncated=source.truncated,
                     notes=list(source.notes), parts=[asdict(p) for p in getattr(source, "parts", ())])
    return Diagnosis(input=info, versions=versions, job=job, findings=findings, benchmarks=ctx.benchmarks,
                     unclaimed=ctx.unclaimed)
