"""Error-looking lines that no parser explains, grouped into masked templates: the candidates for new playbooks.

Numbers, hex ids, addresses, ranks, paths and hostnames are masked so that one error repeated across ranks,
nodes and steps is one template. Lines that share a template with any finding's evidence are claimed."""
from __future__ import annotations

import re

from core.models import Finding
from parsers.base import Context, Hit, Parser

MAX_TEMPLATES = 300
_ERRORISH = re.compile(r"\b(?:[A-Za-z]*Error|ERROR|FATAL|Fatal|fatal|WARN|Exception|FAILED|Failed|failed|Segmentation "
                       r"fault|core dumped|Killed|Aborted|CUDA error|NCCL error|with exception)\b")
_BENIGN = re.compile(r"Traceback \(most recent call last\)|^\s*File \"|During handling of the above|"
                     r"NCCL INFO|Error while creating shared memory|CUDA kernel errors might be asynchronously|"
                     r"For debugging consider passing|Compile with `TORCH_USE_CUDA_DSA`|error_file:|^\s*#|"
                     r"(?i:errors?|failed|failures?)\s*[:=]\s*(?:0|none|n/a)\s*$")   # counters that say all is well
# Masking rules as data, applied in order (Drain-style): the most specific first.
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


def template(line: str) -> str:
    t = line.strip()
    for pat, rep in MASKS:
        t = pat.sub(rep, t)
    return re.sub(r"\s+", " ", t)[:200]


class UnclaimedParser(Parser):
    name = "unclaimed"
    triggers = ("rror", "ERROR", "FATAL", "atal", "WARN", "Exception", "FAILED", "ailed", "Segmentation fault",
                "core dumped", "Killed", "Aborted")

    def __init__(self) -> None:
        self.templates: dict[str, list] = {}  # template -> [count, first line no, example text]

    def feed(self, hit: Hit) -> None:
        t = hit.text
        if not _ERRORISH.search(t) or _BENIGN.search(t):
            return
        key = template(t)
        rec = self.templates.get(key)
        if rec is not None:
            rec[0] += 1
        elif len(self.templates) < MAX_TEMPLATES:
            self.templates[key] = [1, hit.no, t.strip()[:300]]

    def claim(self, findings: list[Finding], ctx: Context) -> None:
        claimed = {template(e.text) for f in findings for e in f.evidence}
        rows = [{"template": k, "count": c, "line": no, "example": ex}
                for k, (c, no, ex) in self.templates.items() if k not in claimed]
        ctx.unclaimed = sorted(rows, key=lambda r: (-r["count"], r["line"]))[:20]

    def finish(self, ctx: Context) -> list[Finding]:
        return []


PARSER = UnclaimedParser
