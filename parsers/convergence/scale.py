"""The fp16 loss scale as every trainer prints it: the scale after an overflow skip, the minimum reached, or the
scale's value under its own key. A scale that falls to SCALE_COLLAPSE after overflows, or a value under TINY_SCALE,
means gradients overflow at nearly every step: loss_nan's scale_collapse."""
from __future__ import annotations

from typing import Any

from parsers.scan.base import EvidenceBox, Hit, rx, search

SCALE_COLLAPSE = 16.0
# The scale after an overflow, as DeepSpeed/apex ("reducing to"), Megatron ("reducing loss scale to") and fairseq
# ("overflow detected, setting loss scale to: X") print it; the minimum as DeepSpeed/apex and fairseq say it
_SCALE_DOWN = rx(r"(?:reducing to|reducing loss scale to|overflow detected, setting loss scale to:?)\s*"
                 r"(\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)")
_SCALE_MIN = rx(r"Current loss scale already at minimum|loss scale (?:has )?reached (?:the )?minimum"
                r"|Minimum loss scale reached")
# A scale printed as a value under any trainer's key (icefall's 'Grad scale is small: 1e-26' warning and its
# 'grad_scale: 0.0078' log field, 'loss_scale=…', 'loss scale: …'): below 1 the scaler has halved it past where
# fp16 training recovers (Megatron prints 'loss scale: 1.0' on every bf16 step; icefall starts at 1.0 and warns
# under 0.01), so a value under TINY_SCALE, or one the trainer itself calls too small, is a collapse
_SCALE_VALUE = rx(r"(?i)\b(?:grad|loss)[ _]scale(?: is (?:too )?small)?(?:, exiting)?['\"]?\s*[:=]\s*['\"]?"
                  r"(\d+(?:\.\d+)?(?:e[-+]?\d+)?)", needs=("scale",), fold=True)
TINY_SCALE = 0.01


class ScaleWatch:
    """The loss parser's view of the loss scale, fed every line that names an overflow or a scale."""

    def __init__(self) -> None:
        self.ev = EvidenceBox()
        self.overflows, self.min_hit, self.tiny = 0, False, False
        self.min_scale: float | None = None

    def _lower(self, v: float) -> None:
        self.min_scale = v if self.min_scale is None else min(self.min_scale, v)

    def read(self, hit: Hit, t: str) -> None:
        if search(_SCALE_MIN, t):
            self.min_hit = True
            self.ev.hit(hit)
            return
        m = search(_SCALE_DOWN, t)
        if m:
            self.overflows += 1
            v = float(m.group(1))
            self._lower(v)
            if v <= SCALE_COLLAPSE:
                self.ev.hit(hit)
            return
        m = search(_SCALE_VALUE, t)
        if m:
            v = float(m.group(1))
            if v < TINY_SCALE or "small" in t.lower():
                self.tiny = True
                self._lower(v)
                self.ev.hit(hit)

    def collapsed(self) -> bool:
        return self.min_hit or self.tiny or (self.min_scale is not None and self.min_scale <= SCALE_COLLAPSE)

    def facts(self) -> dict[str, Any]:
        f: dict[str, Any] = {"overflow_skips": self.overflows}
        if self.min_scale is not None:
            f["min_loss_scale"] = self.min_scale
        return f

    def title(self) -> str:
        if self.min_hit:
            return "fp16 loss scale hit its minimum: gradients overflow at every step"
        if self.overflows:
            return f"fp16 loss scale collapsed to {self.min_scale:g} after {self.overflows} overflow skips"
        return f"fp16 gradient scale collapsed to {self.min_scale:g}: gradients overflow at nearly every step"
