"""How the loss parser reads one line of each format without regexes where it can: Megatron's iteration line
("iteration N/ M | ... | lm loss: X | ... | grad norm: G | ... nan iterations: K |", field by field) and the HF
Trainer's log dict (one C-level match for the usual keys), both the most frequent lines of long logs."""
from __future__ import annotations

import math
import re

from parsers.scan.scanner import MAX_TEXT

ELAPSED = "elapsed time per iteration (ms):"   # a Megatron iteration line's step time


def after(t: str, key: str) -> str | None:
    i = t.find(key)
    if i < 0:
        return None
    j = i + len(key)
    k = t.find("|", j)
    return t[j:k if k >= 0 else len(t)].strip() or None


def megatron_fields(t: str) -> tuple[str, str, str | None, str | None] | None:
    it = after(t, "iteration")
    loss = after(t, "lm loss:") or after(t, "lm_loss:")
    if it is None or loss is None or "/" not in it:
        return None
    it = it.split("/", 1)[0].strip()
    if not it.isdigit():
        return None
    return it, loss, after(t, "grad norm:"), after(t, "number of nan iterations:")


def num(s: str) -> float:
    s = s.lower().lstrip("+")
    if s in ("nan", "-nan"):
        return math.nan
    return float(s)


_HF_BAIL = ("nan", "inf", "overflow", "scale", "step", "iteration", "|", "{", "}")
_NUM = r"'?(-?\d+(?:\.\d*)?(?:e[-+]?\d+)?)'?"
# The Trainer's usual four keys with plain numbers (4.x prints them bare, 5.x quoted): one C-level match for most lines
_HF_PLAIN = re.compile(rf"\{{'loss': {_NUM}, 'grad_norm': {_NUM}, 'learning_rate': {_NUM}, 'epoch': {_NUM}\}}\s*\Z")


def hf_dict(t: str) -> tuple[float, float, float, bool] | None:
    """An HF Trainer log line — {'loss': 2.1, 'grad_norm': 0.8, 'learning_rate': 2e-05, 'epoch': 0.5} — read with
    string operations (the regexes cost most of an HF log's time): (loss, grad norm or NaN when absent, -epoch-1 as
    the loss parser stores an epoch, whether a grad norm was printed). None for anything unusual (a NaN or Inf, a
    step, a prefix, nested values): the loss parser's general path reads those lines."""
    m = _HF_PLAIN.match(t)
    if m:
        return float(m.group(1)), float(m.group(2)), -float(m.group(4)) - 1, True
    if not (t.startswith("{'loss': ") and t.rstrip().endswith("}")):
        return None
    body = t.strip()[1:-1]
    low = body.lower()
    if any(w in low for w in _HF_BAIL):
        return None
    fields = {}
    for part in body.split(", "):
        k, sep, v = part.partition(": ")
        if not sep:
            return None
        fields[k.strip("'")] = v.strip("'")
    try:
        loss = float(fields["loss"])
        g = float(fields["grad_norm"]) if "grad_norm" in fields else math.nan
        it = -float(fields["epoch"]) - 1 if "epoch" in fields else math.nan
    except ValueError:
        return None
    return loss, g, it, "grad_norm" in fields


def hf_line(buf: bytes, ls: int, le: int) -> tuple[tuple[float, float, float, bool], str] | None:
    """An HF Trainer dict line read straight from the chunk (buf[ls:le], tqdm redraws before it): its hf_dict reading
    and its text, as the scanner's cleaning would give them; None where that takes more than the last carriage-return
    segment (a colour code, a blank last segment, a line the scanner would cut) or the dict is not a plain one."""
    if le - ls > MAX_TEXT or buf.find(b"\x1b", ls, le) >= 0:
        return None
    start = buf.rfind(b"\r", ls, le) + 1 or ls
    if buf[start:start + 9] != b"{'loss': ":
        return None
    t = buf[start:le].decode("utf-8", "replace")
    got = hf_dict(t)
    return (got, t.strip()[:500]) if got is not None else None
