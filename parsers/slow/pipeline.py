"""pipeline_bubble: pipeline parallelism with too few micro-batches per step. A 1F1B pipeline of p stages idles
(p − 1) / (v·m + p − 1) of each step while it fills and drains (m micro-batches, v interleaved virtual stages per
GPU); the seeds' target is 10% or less, reached with at least 4·p micro-batches and interleaving.

The sizes come from Megatron's argument dump and its "setting number of micro-batches to constant N" line (NeMo
prints the same), its "using world size: …, pipeline-model-parallel size: N" banner, and DeepSpeed's pipeline engine
("CONFIG: micro_batches=N", "RANK=r STAGE=s LAYERS=…"). What the context collector read (ctx.job) fills the gaps."""
from __future__ import annotations

from typing import Any

from core import layout
from core.models import Finding
from parsers.scan.base import Context, Hit, Parser, rx, search

BUBBLE_BAD_PCT = 10.0   # seed 000 §2.2: pipeline bubble ratio at most 10%
PER_STAGE = 4           # the seeds' rule of thumb: at least four micro-batches per pipeline stage

_PP = rx(r"(?<![\w-])(?:--)?pipeline[_-]model[_-]parallel(?:[_-]| )size\b(?:\s*\.{2,}|:|=)?\s*(\d+)\b")
_DP = rx(r"(?<![\w-])(?:--)?data[_-]parallel(?:[_-]| )size\b(?:\s*\.{2,}|:|=)?\s*(\d+)\b")
_CONSTANT = rx(r"setting number of micro-?batches to constant (\d+)")
_DS_CONFIG = rx(r"CONFIG: micro_batches=(\d+) micro_batch_size=(\d+)(?:.*?num_stages=(\d+))?")
_DS_STAGE = rx(r"\bRANK=\d+ STAGE=(\d+) LAYERS=")
_RAMPUP = rx(r"batch size rampup starting from global batch size (\d+) to global batch size (\d+) with batch ?size "
             r"increments (\d+) over (\d+) samples")
_TRAIN = rx(r"^\s*(?:\S+\s+)?(train_iters|train_samples) \.+ (\S+)\s*$")   # Megatron's dump; both None: not training
_GBS = rx(r"(?<![\w-])(?:--)?global[_-]batch[_-]size\b(?:\s*\.{2,}|:|=)?\s*(\d+)\b")


_JOB_KEY = {"pp": "pipeline_model_parallel_size", "dp": "data_parallel_size", "gbs": "global_batch_size",
            "micro_batch_size": "micro_batch_size"}   # what this reader read itself -> the job setting it falls back on


class BubbleParser(Parser):
    name = "pipeline_bubble"
    triggers = ("pipeline_model_parallel_size", "pipeline-model-parallel size",
                "pipeline-model-parallel-size", "micro-batches to constant",
                "microbatches to constant", "CONFIG: micro_batches=", " STAGE=", "global_batch_size", "global-batch-size",
                "batch size rampup starting from", "train_iters", "train_samples")

    def __init__(self) -> None:
        super().__init__()
        self.seen_at: dict[str, tuple[int, str]] = {}   # what -> the first line that showed it
        self.values: dict[str, int] = {}
        self.deepspeed = False
        self.max_stage = -1
        self.rampup: tuple[int, int, int] | None = None   # (first global batch, increment, ramp-up samples)
        self.train: dict[str, str] = {}   # Megatron's train_iters / train_samples as dumped

    def _keep(self, what: str, value: int, hit: Hit) -> None:
        self.values[what] = value
        self.seen_at.setdefault(what, (hit.no, hit.text))

    def feed(self, hit: Hit) -> None:
        t = hit.text
        m = search(_DS_STAGE, t)
        if m:
            self.max_stage = max(self.max_stage, int(m.group(1)))
            self.seen_at.setdefault("stages", (hit.no, t))
            return
        m = search(_DS_CONFIG, t)
        if m:
            self.deepspeed = True
            self._keep("micro_batches", int(m.group(1)), hit)
            self.values["micro_batch_size"] = int(m.group(2))
            if m.group(3):
                self._keep("pp", int(m.group(3)), hit)
            return
        m = search(_TRAIN, t)
        if m:
            self.train[m.group(1)] = m.group(2)
            return
        m = search(_RAMPUP, t)
        if m:   # Megatron's batch-size ramp-up: few micro-batches until the global batch has grown
            self.rampup = (int(m.group(1)), int(m.group(3)), int(m.group(4)))
            self._keep("gbs", int(m.group(2)), hit)
            self.seen_at["rampup"] = (hit.no, t)
            return
        m = search(_CONSTANT, t)
        if m:
            self._keep("micro_batches", int(m.group(1)), hit)
            return
        for what, pattern in (("pp", _PP), ("dp", _DP), ("gbs", _GBS)):
            m = search(pattern, t)
            if m and what not in self.values:
                self._keep(what, int(m.group(1)), hit)

    def _val(self, job: dict[str, Any], what: str) -> Any:
        return self.values.get(what) or job.get(_JOB_KEY[what])

    def _sizes(self, job: dict[str, Any]) -> tuple[int | None, int | None, int, int | None]:
        """(pipeline stages, micro-batches per step, virtual stages per GPU, micro-batch size)"""
        pp = self._val(job, "pp")
        if self.max_stage >= 1:
            pp = pp or self.max_stage + 1
            self.seen_at.setdefault("pp", self.seen_at["stages"])
        mbs = self._val(job, "micro_batch_size")
        m = self.values.get("micro_batches")
        gbs, dp = self._val(job, "gbs"), self._val(job, "dp")
        if m is None and gbs and mbs and dp and gbs % (mbs * dp) == 0:
            m = gbs // (mbs * dp)
        if m is None and not self.deepspeed and job.get("framework") == "deepspeed":
            m = job.get("gradient_accumulation_steps")
        v = job.get("virtual_pipeline_model_parallel_size") or 1
        per_virtual, layers = job.get("num_layers_per_virtual_pipeline_stage"), job.get("num_layers")
        if v == 1 and per_virtual and layers and pp and layers % (pp * per_virtual) == 0:
            v = layers // (pp * per_virtual)
        return pp, m, v, mbs

    def finish(self, ctx: Context) -> list[Finding]:
        job = ctx.job
        pp, m, v, mbs = self._sizes(job)
        if not pp or pp < 2 or not m or m < 1:
            return []
        if len(self.train) == 2 and set(self.train.values()) == {"None"}:
            return []   # no training run (a text-generation server, a checkpoint converter): no step to fill
        bubble = 100 * layout.bubble(pp, m, v)
        if bubble <= BUBBLE_BAD_PCT:
            return self._rampup(pp, v, mbs, job)
        facts: dict[str, Any] = {"pipeline_stages": pp, "micro_batches": m, "bubble_pct": round(bubble, 1),
                                 "target_micro_batches": PER_STAGE * pp}
        if v > 1:
            facts["virtual_stages"] = v
        facts.update(_targets(pp, m, v, mbs, self._val(job, "gbs"), self._val(job, "dp"), job, self.deepspeed))
        for no, text in sorted({self.seen_at[w] for w in ("pp", "micro_batches", "gbs", "dp") if w in self.seen_at}):
            self.ev.add(no, text)
        title = (f"Pipeline bubble: {pp} stages with {m} micro-batches per step leave each GPU idle about "
                 f"{facts['bubble_pct']:g}% of the step (target: 10% or less)")
        return [Finding(symptom="pipeline_bubble", rule="pipeline_bubble.micro_batches", title=title,
                        severity="warning", confidence=0.7 if bubble < 2 * BUBBLE_BAD_PCT else 0.8,
                        evidence=self.ev.items, facts=facts, first_line=self.ev.first() if self.ev.items else 0)]


    def _rampup(self, pp: int, v: int, mbs: int | None, job: dict[str, Any]) -> list[Finding]:
        """The full batch fills the pipeline, but a batch-size ramp-up starts it with few micro-batches: the bubble of
        the first global batch, and the first global batch that gives four micro-batches per stage."""
        dp = self._val(job, "dp")
        if not self.rampup or not mbs or not dp:
            return []
        start, step, samples = self.rampup
        m0 = max(1, start // (mbs * dp))
        bubble = 100 * layout.bubble(pp, m0, v)
        if bubble <= BUBBLE_BAD_PCT:
            return []
        full = PER_STAGE * pp * mbs * dp
        facts: dict[str, Any] = {"pipeline_stages": pp, "micro_batches": m0, "bubble_pct": round(bubble, 1),
                                 "target_micro_batches": PER_STAGE * pp, "rampup": f"{start} {step} {samples}"}
        if start < full <= (self._val(job, "gbs") or 0):
            facts["full_pipeline_batch"] = full
            facts["target_rampup"] = f"{full} {step} {samples}"
        for no, text in sorted({self.seen_at[w] for w in ("pp", "rampup") if w in self.seen_at}):
            self.ev.add(no, text)
        title = (f"Pipeline bubble during batch-size ramp-up: the first global batch of {start} gives {m0} micro-batch"
                 f"{'es' if m0 > 1 else ''} per step on {pp} stages, about {facts['bubble_pct']:g}% of each step idle")
        return [Finding(symptom="pipeline_bubble", rule="pipeline_bubble.rampup", title=title, severity="warning",
                        confidence=0.5, evidence=self.ev.items, facts=facts,
                        first_line=self.ev.first() if self.ev.items else 0)]


def _targets(pp: int, m: int, v: int, mbs: int | None, gbs: int | None, dp: int | None, job: dict[str, Any],
             deepspeed: bool) -> dict[str, Any]:
    """Concrete values that shrink the bubble, each valid for this job: a smaller micro-batch that keeps the global
    batch and divides it (Megatron: m = global batch / (micro-batch · data-parallel)), else a larger global batch
    (or DeepSpeed's gradient accumulation steps), and a virtual-pipeline size that divides each stage's layers."""
    out: dict[str, Any] = {"source": "deepspeed" if deepspeed else "megatron"}
    want = PER_STAGE * pp
    if gbs:
        out["global_batch_size"] = gbs
    if m < want and mbs and gbs and dp:
        fits = [b for b in range(mbs - 1, 0, -1) if gbs % (b * dp) == 0]
        best = next((b for b in fits if gbs // (b * dp) >= want), None)
        if best is not None:
            out["target_micro_batch_size"] = best
            m = gbs // (best * dp)
        else:
            out["target_global_batch_size"] = want * mbs * dp
            m = want
    elif m < want and deepspeed:   # its pipeline engine runs one micro-batch per gradient-accumulation step
        out["target_gradient_accumulation_steps"] = m = want
    vpp = layout.vpp_for(job, pp) if v == 1 and not deepspeed else None
    if vpp:
        out["target_virtual_stages"] = vpp
        out["layers_per_virtual_stage"] = job["num_layers"] // (pp * vpp)
    out["bubble_pct_after"] = round(100 * layout.bubble(pp, m, vpp or v), 1)
    return out


PARSERS = (BubbleParser,)
