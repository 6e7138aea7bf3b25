"""loss_spike and loss_nan from the numeric training series of Megatron-LM / Megatron-DeepSpeed, DeepSpeed, apex,
HF Trainer, Lightning, torchtitan, GPT-NeoX and plain print loops.

A spike is a point more than `rel` above the median of the previous `window` points *and* more than `mad_k`
robust deviations away from it, with at least `min_history` points of history (SpikeThresholds). A slow rise or
early-training noise fails one of the two tests. A team can set its own thresholds (TRIAGE_LOSS_SPIKE; the engine
passes them in as the parser's Options). fp16 overflow skips are normal unless the loss scale collapses to
SCALE_COLLAPSE or below (parsers.convergence.scale)."""
from __future__ import annotations

import math
import re
from typing import Any

from core.models import Evidence, Finding
from parsers.scan.base import Context, EvidenceBox, Hit, Parser, rank_of, rx, search
from parsers.convergence.bulk import BATCH, read_chunk, read_line
from parsers.convergence.scale import ScaleWatch
from parsers.convergence.lines import ELAPSED, after as _after, hf_dict, hf_line, megatron_fields as _megatron_fields, num as _f
from parsers.convergence.series import Series, SpikeThresholds, line_of as _line
from parsers.step_series import StepSeries

GNAN_RUN = 3   # NaN grad norms in a row, up to the end of the log, beside a finite loss (fp16 skips come in ones and twos)

_NUM = r"(nan|-nan|[-+]?inf|[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
# "Train loss <iter> <value>" too, "loss at batch 5 = …", and a value printed as a tensor: "loss tensor(0.69, device=…)"
_LOSS = rx(r"(?i)(?<![\w.])(?:reduced_)?(?:lm[ _]loss|train(?:ing)?[_/ ]loss|loss(?:/train(?:/total)?)?)(?:[ _]value|_step|_epoch)?['\"]?"
           r"(?:\s+(?:at|@)\s+(?:batch|step|iter(?:ation)?)\s+\d+)?"
           r"\s*(?:[:=]\s*|\s+(?:\d+\s+(?=[\d.]+\s))?)['\"]?(?:tensor\(|\[\s*)?" + _NUM + r"(?![\w.])")
_GNORM = rx(r"(?i)(?:grad[ _]norm|(?<![\w])gnorm)['\"]?\s*[:=]\s*['\"]?\[?\s*" + _NUM)   # fairseq: gnorm=   # transformers 5 quotes its values
_ITER = rx(r"iteration\s+(\d+)\s*/|\bstep['\"]?[:=\s]\s*(\d+)|global_step['\"]?[=:\s]+(\d+)|\|\s*(\d+)/\d+ \[",
           needs=("iteration", "step", "|"))
_EPOCH = rx(r"\bepoch[:\s]\s*(\d+)\b|'epoch':\s*'?([\d.]+)", needs=("epoch",))   # only where no step is named on the line
# Any loss term (train/backbone_loss, loss_cls, 'Loss is nan') read as NaN/Inf, whatever the format; keys that hold
# a bound rather than a value (best_loss: inf at start-up, loss_scale) are not a loss.
_TERM_NAN = rx(r"(?i)(?:([\w./-]*loss[\w./-]*)['\"]?\s*[:=]\s*['\"]?(?:tensor\(|\[\s*)?|\bloss\s+(?:is|became|becomes)\s+)"
               r"(nan|-nan|[-+]?inf(?:inity)?)\b",
               needs=("nan", "inf"), fold=True)   # ~0.6 ms a line: run only where it can match
# An AverageMeter-style value: the batch's value, then the running average in parentheses (torchvision's and timm's
# ImageNet scripts, deepspeech.pytorch, fairseq's "loss=9.57 (10.94)"); per-batch values of such loggers swing with
# each batch's content, the average does not
_RUNNING_AVG = re.compile(r"\s*\(\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|nan|inf)\s*\)")
_BOUND_KEY = ("best", "min", "max", "prev", "scale", "lowest")
_NAN_ITERS = rx(r"number of nan iterations:\s*(\d+)", needs=("nan iterations",))
# a trainer's own check on a non-finite gradient norm, stopping or skipping the step (Megatron: "found NaN in local
# grad norm in backwards pass", its Inf and "grad-norm" spellings; ESPnet and others: "The grad norm is nan.
# Skipping updating the model.")
_NAN_FOUND = rx(r"(?i)found (?:nan|inf)\w* in (?:the )?(?:local )?grad(?:ient)?[ -]norm"
                r"|\bgrad(?:ient)?[ _-]?norm (?:is|was|became|becomes) (?:nan|-nan|[-+]?inf)\b",
                needs=("found", "norm is", "norm was", "norm bec"), fold=True)


def _str(text) -> str:
    text = _line(text)
    return (text.decode("utf-8", "replace") if isinstance(text, bytes) else text).strip()[:500]


# (and the HF Trainer's end-of-training summary, whose train_loss is the run's average)
_SKIP = ("validation", "eval_", "eval ", "val_loss", "val loss", "test loss", "test_loss", "train_samples_per_second")


class LossParser(Parser):
    Options = SpikeThresholds
    name = "loss"
    triggers = ("loss", "Loss", "LOSS", "grad norm", "grad_norm", "OVERFLOW", "Gradient overflow", "nan iterations",
                "overflow detected", "rad scale", "rad_scale", "gnorm=")
    after = 3
    # A plain Megatron log: iteration lines are read chunk-wide; scale and overflow lines still line by line.
    bulk = re.compile(rb"iteration\s+(\d+)\s*/([^\n]*)")
    bulk_triggers = ("OVERFLOW", "Gradient overflow", "loss scale already", "'loss'", "loss=")

    @classmethod
    def bulk_wanted(cls, sample: bytes) -> bool:
        """A log that is mostly single-line Megatron iterations with the loss printed (at least 30% of lines)."""
        if b"lm loss:" not in sample and b"lm_loss:" not in sample:   # (C-speed looks before the regex pass)
            return False
        lines = sample.count(b"\n") + 1
        if (sample.count(b"lm loss:") + sample.count(b"lm_loss:")) * 10 < 3 * lines:
            return False   # (each line the regex pass would count holds one of these)
        found = sum(1 for m in cls.bulk.finditer(sample) if b"lm loss:" in m.group(2) or b"lm_loss:" in m.group(2))
        return found * 10 >= 3 * lines

    def feed_chunk(self, buf: bytes, start_no: int) -> None:
        self._flush_hf()
        read_chunk(self, buf, start_no)   # ordinary lines in batches, any other one through feed_bulk

    def feed_bulk(self, no: int, m) -> None:
        read_line(self, no, m)   # one iteration line, every case (read_chunk sends here those it does not batch)

    def __init__(self, options: SpikeThresholds | None = None) -> None:
        self.spike = options or SpikeThresholds()
        self.steps = StepSeries("megatron")   # "elapsed time per iteration (ms)"
        self.series: dict[str, Series] = {}
        self.skip_to = 0
        self.nan_ev = EvidenceBox()
        self.scale = ScaleWatch()
        self.nan_iters = self.grad_nan = self.nan_skips = 0
        self.gnan_points = 0     # NaN grad norms on lines whose loss is finite
        self.gnan_run = 0        # how many of them in a row, up to the last grad norm seen
        self.gnan_zero = 0       # ... of which the loss reads exactly 0 (the model has collapsed, not skipped a step)
        self.gnan_ev = EvidenceBox()
        self.gfinite = False     # whether any finite grad norm was read (set on the general path)
        self.gnan_at = math.nan  # where the current run of NaN grad norms began (a step, or an epoch stored negative)
        self.term_nan, self.term_key = 0, ""   # NaN/Inf loss terms outside the main loss series, the first key
        self.bulk_series: Series | None = None
        self.bulk_it, self.bulk_loss = b"", b""   # the bulk curve's last step and loss, as printed
        self.hf_batch: list[tuple] = []   # HF dict points read by quick(), not yet on the curve

    def _series(self, key: str) -> Series:
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = Series(self.spike)
        return s

    def quick(self, buf: bytes, ls: int, le: int, no: int) -> bool:
        """A line only this reader wants, read without building a Hit (Scanner.feed): an HF Trainer dict, as feed()
        would take it. False: read it the usual way."""
        got = hf_line(buf, ls, le)
        if got is None:
            return False
        if no > self.skip_to:
            self.hf_batch.append((*got[0], no, got[1]))
            if len(self.hf_batch) >= BATCH:
                self._flush_hf()
        return True

    def _flush_hf(self) -> None:
        """The HF points quick() gathered, onto the curve (before any other line is read, and at the end)."""
        batch = self.hf_batch
        if batch:
            vs, gs, its, has_g, nos, texts = zip(*batch)
            self._series("").add_many(vs, gs, its, nos, texts)
            if any(has_g):
                self.gnan_run = self.gnan_zero = 0   # the grad norm is finite there
                self.gfinite = True
            batch.clear()

    def _hf_point(self, hf: tuple[float, float, float, bool], no: int, text: str) -> None:
        """An HF Trainer dict's point (hf_dict's reading), from feed()."""
        v, g, itv, has_g = hf
        self._series("").add(v, g, itv, no, text)
        if has_g:
            self.gnan_run = self.gnan_zero = 0   # the grad norm is finite here
            self.gfinite = True

    def __getstate__(self) -> dict:
        self._flush_hf()   # (a worker process sends its readers back)
        return self.__dict__

    def feed(self, hit: Hit) -> None:
        self._flush_hf()
        if hit.no <= self.skip_to:
            return
        t = hit.text
        hf = hf_dict(t) if t[:1] == "{" else None
        if hf is not None:   # an HF Trainer dict: as the general path reads it, without its regexes
            self._hf_point(hf, hit.no, hit.text.strip()[:500])
            return
        if "iteration" in t and "|" in t and not t.rstrip().endswith("|"):
            for i, nxt in enumerate(hit.after):
                if "iteration" in nxt:   # the next record (NeMo's lines do not end with "|"), not a wrapped tail
                    break
                t += nxt
                if nxt.rstrip().endswith("|"):
                    self.skip_to = hit.no + i + 1
                    break
        if "lm" in t and "iteration" in t and t.rstrip().endswith("|"):
            fields = _megatron_fields(t)
            if fields:
                self._megatron(hit, fields, t)
                return
        if "OVERFLOW" in t or "overflow" in t or "scale" in t.lower():
            self.scale.read(hit, t)
        if any(s in t for s in _SKIP):
            return
        m = search(_NAN_FOUND, t)
        if m:   # a check that stops counts at once; one that skips the step, from its GNAN_RUN-th time on (_nan_finding)
            if m.group(0)[:5].lower() == "found":
                self.grad_nan += 1
            else:
                self.nan_skips += 1
            self.nan_ev.hit(hit)
            return
        m = search(_NAN_ITERS, t)
        if m and int(m.group(1)) > 0:
            self.nan_iters = max(self.nan_iters, int(m.group(1)))
            self.nan_ev.hit(hit)
        lm = search(_LOSS, t)
        gm = search(_GNORM, t)
        if not (lm and not math.isfinite(_f(lm.group(1)))):
            self._term_nan(hit, t)
        if not lm and not gm:
            return
        key = str(rank_of(hit.label + t) or "")
        s = self._series(key)
        it = search(_ITER, t)
        ep = None if it else search(_EPOCH, t)
        itv = float(next(g for g in (it or ep).groups() if g is not None)) if it or ep else math.nan
        if ep:
            itv = -itv - 1  # stored negative so facts can tell an epoch from a step
        g = _f(gm.group(1)) if gm else math.nan
        if lm:
            v = _f(lm.group(1))
            avg = _RUNNING_AVG.match(t, lm.end())
            if avg and math.isfinite(v):
                v = _f(avg.group(1))   # "Loss 3.2168 (37.0903)": the trainer's running average is its trend
            s.add(v, g, itv, hit.no, hit.text.strip()[:500])
            if not math.isfinite(v):
                self.nan_ev.hit(hit)
            elif gm:   # a finite loss beside a NaN grad norm: one early fp16 skip is normal, a run of them is not
                self.gnan_run = self.gnan_run + 1 if not math.isfinite(g) else 0
                self.gnan_zero = self.gnan_zero + 1 if self.gnan_run and v == 0 else 0
                self.gfinite = self.gfinite or math.isfinite(g)
                if self.gnan_run == 1:
                    self.gnan_at = itv
                if self.gnan_run:
                    self.gnan_points += 1
                    self.gnan_ev.hit(hit)
        elif gm and not math.isfinite(g):
            self.grad_nan += 1
            self.nan_ev.hit(hit)

    def _term_nan(self, hit: Hit, t: str) -> None:
        m = search(_TERM_NAN, t)
        if m and not any(b in (m.group(1) or "").lower() for b in _BOUND_KEY):
            self.term_nan += 1
            self.term_key = self.term_key or (m.group(1) or "loss")
            self.nan_ev.hit(hit)

    def _megatron(self, hit, fields: tuple, t: str = "", key: str | None = None) -> None:
        it, loss, gnorm, nans = fields
        if key is None:
            key = str(rank_of(hit.label + t) or "") if (hit.label or t).lstrip().startswith("[") else ""
        s = self._series(key)
        try:
            v = _f(loss)
            g = _f(gnorm) if gnorm else math.nan
        except ValueError:
            return
        if nans and nans.isdigit() and int(nans) > 0:
            self.nan_iters = max(self.nan_iters, int(nans))
            self.nan_ev.hit(hit)
        if not math.isfinite(v):
            self.nan_ev.hit(hit)
        elif gnorm and not math.isfinite(g):   # a line without a grad norm (--clip-grad 0) is not a NaN one
            self.grad_nan += 1
        s.add(v, g, float(it), hit.no, hit.text.strip()[:500])
        ms = _after(t or hit.text, ELAPSED)
        if ms is not None:
            self._elapsed(int(it), ms, hit.no)

    def _elapsed(self, it: int, ms, no: int) -> None:
        try:
            self.steps.add(it, float(ms) / 1000, no)
        except ValueError:
            pass

    def seen(self) -> bool:
        self._flush_hf()
        return bool(self.nan_ev.total or self.scale.ev.total or any(s.spikes for s in self.series.values()))

    def finish(self, ctx: Context) -> list[Finding]:
        self._flush_hf()
        if len(self.steps):
            ctx.step_series.append(self.steps)
        out: list[Finding] = []
        nan = self._nan_finding(ctx)
        if nan:
            out.append(nan)
        spike = self._spike_finding()
        if spike:
            out.append(spike)
        return out

    def _gnan_counts(self, ctx: Context) -> bool:
        """A run of NaN grad norms beside a finite loss is a failure when it is long, when the loss collapses to 0
        with it, or under bf16 (no loss scaling, so no step is ever skipped on purpose)."""
        return self.gnan_run >= GNAN_RUN or (self.gnan_run >= 2 and self.gnan_zero > 0) or \
            (self.gnan_run > 0 and ctx.job.get("bf16") is True) or (self.gnan_run >= 2 and self._every_step_nan())

    def _every_step_nan(self) -> bool:
        """A short paste whose every logged grad norm is NaN, past the first steps (where fp16 skips belong): the
        run is not skipping a step now and then, it never had a finite gradient in what was pasted."""
        if self.gfinite or self.gnan_points != self.gnan_run or not math.isfinite(self.gnan_at):
            return False
        at = self.gnan_at
        return (-at - 1) > 0 if at < 0 else at > 2

    def _nan_finding(self, ctx: Context) -> Finding | None:
        f: dict[str, Any] = {}
        grad_nan = self.grad_nan + (self.nan_skips if self.nan_skips >= GNAN_RUN else 0)   # skips: a run of them
        nans = [s for s in self.series.values() if s.first_nan]
        if nans:
            s = min(nans, key=lambda x: x.first_nan["line"])
            first = s.first_nan
            f["first_nan_line"] = first["line"]
            f.update(_position("first_nan", first["iteration"]))
            if first["last_finite"] is not None:
                f["last_finite_loss"] = first["last_finite"]
            f["nan_points"] = s.nan_points
            f["persists"] = s.last_is_nan
            rule, title = "loss_nan.loss", "Training loss became NaN/Inf"
            title += _where(f, "first_nan")
            if first["last_finite"] is not None:
                title += f" (last finite loss {first['last_finite']:.4g})"
            if f["persists"]:
                title += " and stays NaN"
        elif grad_nan or self.nan_iters or self._gnan_counts(ctx):
            rule, title = "loss_nan.grad_norm", "Gradient norm is NaN/Inf"
            f["grad_norm_nan_points"] = grad_nan + self.gnan_points
            if self._gnan_counts(ctx):
                title += f" on the last {self.gnan_run} logged steps" + (
                    ", and the loss has collapsed to 0" if self.gnan_zero else " although the loss is finite")
                self.nan_ev.items.extend(self.gnan_ev.items)
            if self.nan_iters:
                f["nan_iterations"] = self.nan_iters
                title = f"Megatron counts {self.nan_iters} NaN iteration(s)" if not grad_nan else title
        elif self.term_nan:
            rule = "loss_nan.loss_term"
            f["nan_points"] = self.term_nan
            f["loss_term"] = self.term_key
            title = f"A loss term became NaN/Inf ({self.term_key})"
        elif self.scale.collapsed():
            rule, title = "loss_nan.scale_collapse", self.scale.title()
            f.update(self.scale.facts())
        else:
            return None
        ev = sorted(self.nan_ev.items + self.scale.ev.items, key=lambda e: e.line)[:5]
        return Finding(symptom="loss_nan", rule=rule, title=title, severity="error", confidence=0.9, evidence=ev,
                       facts=f, first_line=min((e.line for e in ev), default=0))

    def _spike_finding(self) -> Finding | None:
        spiky = [s for s in self.series.values() if s.best]
        if not spiky:
            return None
        b = max((s.best for s in spiky), key=lambda x: x["ratio"])
        med, v = b["med"], b["value"]
        f: dict[str, Any] = {"loss_before": round(med, 4), "loss_at_spike": v, "ratio": round(b["ratio"], 2),
                             "line": b["line"], "spikes": sum(s.spikes for s in spiky)}
        f.update(_position("", b["iteration"]))
        if math.isfinite(b["gnorm"]) and b["gnorm_before"] and b["gnorm"] > 0:
            f["grad_norm_before"] = round(b["gnorm_before"], 4)
            f["grad_norm_at_spike"] = b["gnorm"]
        if b["peak"] > v:
            f["peak_loss"] = b["peak"]
            f.update(_position("peak", b["peak_iteration"]))
        f["recovered"] = b["later_n"] > 0 and b["later_min"] <= med * 1.2
        where = _where(f, "") or f" at line {f['line']}"
        jump = f"{b['ratio']:.1f}× the recent median" if med > 0 else f"{v - med:.3g} above the recent level"
        title = f"Loss spike{where}: {med:.4g} → {v:.4g} ({jump})"
        if "peak_loss" in f:
            title += f", peaking at {b['peak']:.4g}"
        if "grad_norm_at_spike" in f:
            title += f"; grad norm {f['grad_norm_before']:.3g} → {f['grad_norm_at_spike']:.3g}"
        if f["recovered"]:
            title += "; back to baseline since"
        elif b["later_n"]:
            title += f"; not back to baseline (last {b['last']:.4g})"
        evidence = [Evidence(line=no, text=_str(text)) for no, text in b["evidence"]]
        return Finding(symptom="loss_spike", rule="loss_spike.robust_jump", title=title, severity="warning",
                       confidence=0.85, evidence=evidence, facts=f, first_line=b["line"])


def _position(prefix: str, it: float) -> dict[str, Any]:
    """Facts for where in training a point sits: an iteration/step, or an (HF-style) epoch."""
    key = f"{prefix}_" if prefix else ""
    if not math.isfinite(it):
        return {}
    if it < 0:
        return {f"{key}epoch": round(-it - 1, 4)}
    return {f"{key}iteration": int(it)}


def _where(f: dict[str, Any], prefix: str) -> str:
    key = f"{prefix}_" if prefix else ""
    if f"{key}iteration" in f:
        return f" at step {f[key + 'iteration']}"
    if f"{key}epoch" in f:
        return f" at epoch {f[key + 'epoch']}"
    return ""


PARSERS = (LossParser,)
