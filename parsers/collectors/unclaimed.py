"""Error-looking lines that no parser explains, grouped into masked templates: the candidates for new playbooks.

Numbers, hex ids, addresses, ranks, paths and hostnames are masked (core.templates) so that one error repeated
across ranks, nodes and steps is one template. The engine drops the templates a finding's evidence shares."""
from __future__ import annotations

import re

from core.redact import mask_secrets
from core.templates import template
from parsers.scan.base import Collector, Context, Hit

MAX_TEMPLATES = 300
MAX_SHAPES = 50_000
# Lines that differ only in which non-zero digits they hold get the same verdict and template (every mask treats
# digits alike; zero is kept, since "errors: 0" is benign and "errors: 10" is not): one regex pass per shape. A line
# whose shape is new is then tried under a coarser one, dearer to work out: every digit alike except a lone zero, and
# inside a hex id (the template's own hex pattern: a shard's file name, an address) every digit and every letter a-f
# alike too — it cannot be a lone zero — while a digit stays apart from a letter (an account id is 12 digits).
_SHAPE = str.maketrans("123456789", "#########")
_DIGITS = str.maketrans("0123456789", "##########")
_HEX_ALIKE = str.maketrans("0123456789abcdefABCDEF", "##########xxxxxxxxxxxx")
_HEX_RUN = re.compile(r"0x[0-9a-fA-F]+|\b[0-9a-f]{8,}\b")   # as core.templates masks them
_LONE_ZERO = re.compile(r"(?<![0-9])0(?![0-9])")


def _coarse(t: str) -> str:
    t = _HEX_RUN.sub(lambda m: m.group().translate(_HEX_ALIKE), t)
    shape = t.translate(_DIGITS)
    zeros = [m.start() for m in _LONE_ZERO.finditer(t)] if "0" in t else ()
    if zeros:
        chars = list(shape)
        for i in zeros:
            chars[i] = "0"
        shape = "".join(chars)
    return shape


_ERRORISH = re.compile(r"\b(?:[A-Za-z]*Error|ERROR|FATAL|Fatal|fatal|WARN|Exception|FAILED|Failed|failed|Segmentation "
                       r"fault|core dumped|Killed|Aborted|CUDA error|NCCL error|with exception)\b")
_BENIGN = re.compile(r"Traceback \(most recent call last\)|^\s*File \"|During handling of the above|"
                     r"^\s*(?:\[[^\]]*\]:?\s*)*raise \w|"                       # a traceback's source line
                     r"\bfailed \(exitcode: -?\d+\) local_rank:|ChildFailedError|"  # torchrun's summary of a crash
                     r"^\s*(?:\[\d+\]:\s*)?(?:exitcode|error_file|traceback)\s*:|"
                     r"NCCL INFO|Error while creating shared memory|CUDA kernel errors might be asynchronously|"
                     r"For debugging consider passing|Compile with `TORCH_USE_CUDA_DSA`|error_file:|^\s*#|"
                     r"(?i:errors?|failed|failures?)\s*[:=]\s*(?:0|none|n/a)\s*$")   # counters that say all is well


class UnclaimedCollector(Collector):
    name = "unclaimed"
    triggers = ("rror", "ERROR", "FATAL", "atal", "WARN", "Exception", "FAILED", "ailed", "Segmentation fault",
                "core dumped", "Killed", "Aborted")

    def __init__(self) -> None:
        self.templates: dict[str, list] = {}  # template -> [count, first line no, example text]
        self.shapes: dict[str, str | None] = {}   # line shape -> its template, None when not an error line
        self.coarse: dict[str, str | None] = {}   # the same by coarse shape

    def feed(self, hit: Hit) -> None:
        t = hit.text
        shape = t.translate(_SHAPE)
        key = self.shapes.get(shape, "")
        if key == "":
            coarse = _coarse(t)
            key = self.coarse.get(coarse, "")
            if key == "":
                key = None if not _ERRORISH.search(t) or _BENIGN.search(t) else template(mask_secrets(t))
                self.coarse[coarse] = key
            if len(self.shapes) >= MAX_SHAPES:
                self.shapes.clear()
                self.coarse.clear()
            self.shapes[shape] = key
        if key is None:
            return
        rec = self.templates.get(key)
        if rec is not None:
            rec[0] += 1
        elif len(self.templates) < MAX_TEMPLATES:   # masked before templating: a template must not keep a key
            self.templates[key] = [1, hit.no, mask_secrets(hit.raw).strip()[:300]]

    def collect(self, ctx: Context) -> None:
        rows = [{"template": k, "count": c, "line": no, "example": ex} for k, (c, no, ex) in self.templates.items()]
        ctx.error_lines = sorted(rows, key=lambda r: (-r["count"], r["line"]))


COLLECTOR = UnclaimedCollector
