"""moe_imbalance: expert token counts far from even (more than 20% off the mean) or token drop rate above 10%."""
from __future__ import annotations

from typing import Any

from core.models import Finding
from parsers.base import Context, Hit, Parser, rx, search

DEVIATION_LIMIT = 0.20  # the runbook's target: every expert within 20% of the mean load
DROP_LIMIT = 0.10       # the runbook's target: at most 10% of tokens dropped
MIN_TOKENS = 100

_COUNTS = rx(r"(?i)(?:expert[ _](?:usage|counts?|load)|tokens[ _]per[ _]expert)\s*[:=]?\s*(?:tensor\()?\[([\d.,\s]+)\]")
_DROP = rx(r"(?i)(?:token[ _])?drop(?:ped)?[ _](?:rate|ratio|fraction)\s*[:=]\s*([\d.]+)\s*(%)?"
           r"|dropped[ _]tokens\s*[:=]\s*(\d+)\s*/\s*(\d+)")


class MoeParser(Parser):
    name = "moe_imbalance"
    triggers = ("xpert", "drop rate", "drop_rate", "drop ratio", "drop_ratio", "dropped tokens", "dropped_tokens",
                "drop fraction", "drop_fraction")

    def __init__(self) -> None:
        super().__init__()
        self.worst_dev: tuple[float, list[float], int] | None = None
        self.worst_drop: tuple[float, int] | None = None
        self.bad = 0
        self.observations = 0

    def feed(self, hit: Hit) -> None:
        t = hit.text
        m = search(_COUNTS, t)
        if m:
            try:
                counts = [float(x) for x in m.group(1).replace(",", " ").split()]
            except ValueError:
                counts = []
            if len(counts) >= 2 and sum(counts) >= MIN_TOKENS:
                self.observations += 1
                mean = sum(counts) / len(counts)
                dev = max(abs(c - mean) for c in counts) / mean
                if dev > DEVIATION_LIMIT:
                    self.bad += 1
                    self.ev.add(hit.no, t)
                if self.worst_dev is None or dev > self.worst_dev[0]:
                    self.worst_dev = (dev, counts, hit.no)
        m = search(_DROP, t)
        if m:
            if m.group(3):
                rate = int(m.group(3)) / max(1, int(m.group(4)))
            else:
                rate = float(m.group(1)) / (100 if m.group(2) or float(m.group(1)) > 1 else 1)
            self.observations += 1
            if rate > DROP_LIMIT:
                self.bad += 1
                self.ev.add(hit.no, t)
            if self.worst_drop is None or rate > self.worst_drop[0]:
                self.worst_drop = (rate, hit.no)

    def finish(self, ctx: Context) -> list[Finding]:
        if not self.bad:
            return []
        f: dict[str, Any] = {"observations": self.observations, "imbalanced_observations": self.bad}
        parts = []
        if self.worst_dev and self.worst_dev[0] > DEVIATION_LIMIT:
            dev, counts, _ = self.worst_dev
            mean = sum(counts) / len(counts)
            f["expert_counts"] = [int(c) if c.is_integer() else c for c in counts]
            f["max_deviation"] = round(dev, 3)
            f["hot_experts"] = [i for i, c in enumerate(counts) if c > mean * (1 + DEVIATION_LIMIT)]
            f["cold_experts"] = [i for i, c in enumerate(counts) if c < mean * (1 - DEVIATION_LIMIT)]
            lo = min(counts)
            if lo > 0:
                f["max_min_ratio"] = round(max(counts) / lo, 2)
            parts.append(f"expert load is {dev:.0%} off the mean (limit 20%); hot experts {f['hot_experts']}")
        if self.worst_drop and self.worst_drop[0] > DROP_LIMIT:
            f["drop_rate"] = round(self.worst_drop[0], 4)
            parts.append(f"{self.worst_drop[0]:.1%} of tokens dropped (limit 10%)")
        return [Finding(symptom="moe_imbalance", rule="moe_imbalance.routing", severity="warning", confidence=0.85,
                        title="MoE routing is imbalanced: " + "; ".join(parts), evidence=self.ev.items, facts=f,
                        first_line=self.ev.first())]


PARSERS = (MoeParser,)
