"""Which training framework printed the log (Megatron, DeepSpeed, the HF Trainer, Lightning, FSDP), so that advice
names the settings of that framework (core/frameworks.py), and whether it ran in a container (so that docker options
are given only there). Finds no symptom."""
from __future__ import annotations

from core import frameworks as F
from parsers.scan.base import Collector, Context, Hit

_BY_LITERAL = {lit: fw for fw, lits in F.SIGNATURES.items() for lit in lits}
_RUNTIME = dict(F.CONTAINER_SIGNS)
_BY_LITERAL.update({lit: F.CONTAINER for lit in _RUNTIME})
_ALL = len(F.SIGNATURES) + 1


class FrameworkCollector(Collector):
    name = "framework"
    triggers = tuple(_BY_LITERAL)

    def __init__(self) -> None:
        self.seen: set[str] = set()
        self.runtime: str | None = None

    def feed(self, hit: Hit) -> None:
        if len(self.seen) == _ALL:
            return
        t = hit.text
        if F.CONTAINER not in self.seen:
            self.runtime = next((r for lit, r in _RUNTIME.items() if lit in t), None)
        self.seen.update(fw for lit, fw in _BY_LITERAL.items() if fw not in self.seen and lit in t)

    def collect(self, ctx: Context) -> None:
        if self.runtime:
            ctx.job.setdefault("container", self.runtime)
        primary, sharding = F.detect(self.seen)
        if primary:
            ctx.job.setdefault("framework", primary)
        if sharding and sharding != primary:
            ctx.job.setdefault("sharding_engine", sharding)


COLLECTOR = FrameworkCollector
