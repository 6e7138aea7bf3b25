"""moe_imbalance: expert token counts far from even (more than 20% off the mean) or token drop rate above 10%."""
from __future__ import annotations

from typing import Any

from core.models import Finding
from parsers.scan.base import Context, Hit, Parser, findall, rx, search

DEVIATION_LIMIT = 0.20  # the runbook's target: every expert within 20% of the mean load
DROP_LIMIT = 0.10       # the runbook's target: at most 10% of tokens dropped
MIN_TOKENS = 100

_COUNTS = rx(r"(?i)(?:expert[ _](?:usage|counts?|load)|tokens[ _]per[ _]expert)\s*[:=]?\s*(?:tensor\()?\[([\d.,\s]+)\]")
# tokens per expert-parallel rank, as EP load-balancer tools print them: "EP16 ... [8, 0, 8, 0, ...]" with one
# number per rank (the list's length must match the EP size)
_EP_COUNTS = rx(r"\bEP ?(\d+)\b[^\[\n]*\[([\d.,\s]+)\]")
_DROP = rx(r"(?i)(?:token[ _])?drop(?:ped)?[ _](?:rate|ratio|fraction)\s*[:=]\s*([\d.]+)\s*(%)?"
           r"|dropped[ _]tokens\s*[:=]\s*(\d+)\s*/\s*(\d+)")

# Routing-balance metrics some trainers print instead of raw counts: (name, pattern, direction, limit). "high" means
# a value above the limit is imbalanced. Megatron-Core and OLMo-core normalise so that 1.0 is an even load.
_METRICS = (
    ("load_balancing_loss", rx(r"\bload_balancing_loss: ([\d.]+(?:E[+-]\d+)?)"), "high", 2.0),
    ("load_imbalance", rx(r"\bload imbalance=([\d.]+)"), "high", 2.0),
    ("router_max_frac_mean", rx(r"router/max_frac_mean[ =:]+([\d.]+)"), "high", 0.35),
    ("router_max_frac_max", rx(r"router/max_frac_max[ =:]+([\d.]+)"), "high", 0.9),
    ("router_active_min", rx(r"router/active_min[ =:]+(\d+)"), "low", 2),
    ("entropy_normalized", rx(r"entropy_normalized[ =:]+([\d.]+)"), "low", 0.5),
    ("kl_to_uniform", rx(r"kl_to_uniform[ =:]+([\d.]+)"), "high", 2.0),
    ("max_tpe_over_median", rx(r"max_tpe: ([\d.]+)"), "high", 3.0),
)
_MEDIAN_TPE = rx(r"median_tpe: ([\d.]+)")


class MoeParser(Parser):
    name = "moe_imbalance"
    triggers = ("xpert", "drop rate", "drop_rate", "drop ratio", "drop_ratio", "dropped tokens", "dropped_tokens",
                "drop fraction", "drop_fraction", "load_balancing_loss", "load imbalance", "router/", "entropy_normalized",
                "kl_to_uniform", "_tpe", *(f"EP{d}" for d in "123456789"))

    def __init__(self) -> None:
        super().__init__()
        self.worst_dev: tuple[float, list[float], int] | None = None
        self.worst_drop: tuple[float, int] | None = None
        self.bad = 0
        self.observations = 0
        self.metric_seen: dict[str, int] = {}
        self.metric_bad: dict[str, list[float]] = {}
        self.median_tpe: float | None = None
        self.max_tpe: list[tuple[float, int, str]] = []
        self.per_rank = False   # the worst counts are per expert-parallel rank, not per expert

    def _metrics(self, hit: Hit) -> None:
        m = search(_MEDIAN_TPE, hit.text)
        if m:
            self.median_tpe = float(m.group(1))
        for name, pat, direction, limit in _METRICS:
            for m in findall(pat, hit.text):
                value = float(m.group(1))
                if name == "max_tpe_over_median":
                    self.max_tpe.append((value, hit.no, hit.text))
                    continue
                self.metric_seen[name] = self.metric_seen.get(name, 0) + 1
                if (value > limit) if direction == "high" else (value < limit):
                    self.metric_bad.setdefault(name, []).append(value)
                    self.ev.hit(hit)

    def feed(self, hit: Hit) -> None:
        t = hit.text
        self._metrics(hit)
        m = search(_COUNTS, t)
        ep = None if m else search(_EP_COUNTS, t)
        if m or ep:
            try:
                counts = [float(x) for x in (m or ep).group(m and 1 or 2).replace(",", " ").split()]
            except ValueError:
                counts = []
            if ep and len(counts) != int(ep.group(1)):
                counts = []
            if len(counts) >= 2 and sum(counts) >= MIN_TOKENS:
                self.observations += 1
                mean = sum(counts) / len(counts)
                dev = max(abs(c - mean) for c in counts) / mean
                if dev > DEVIATION_LIMIT:
                    self.bad += 1
                    self.ev.hit(hit, t)
                if self.worst_dev is None or dev > self.worst_dev[0]:
                    self.worst_dev = (dev, counts, hit.no)
                    self.per_rank = ep is not None
        m = search(_DROP, t)
        if m:
            if m.group(3):
                rate = int(m.group(3)) / max(1, int(m.group(4)))
            else:
                rate = float(m.group(1)) / (100 if m.group(2) or float(m.group(1)) > 1 else 1)
            self.observations += 1
            if rate > DROP_LIMIT:
                self.bad += 1
                self.ev.hit(hit, t)
            if self.worst_drop is None or rate > self.worst_drop[0]:
                self.worst_drop = (rate, hit.no)

    def _metric_verdict(self) -> tuple[str, float] | None:
        """The worst routing metric that stays out of range: twice or more, or on every reading it had."""
        if self.max_tpe and self.median_tpe:
            for value, no, text in self.max_tpe:
                self.metric_seen["max_tpe_over_median"] = self.metric_seen.get("max_tpe_over_median", 0) + 1
                if value / self.median_tpe > 3.0:
                    self.metric_bad.setdefault("max_tpe_over_median", []).append(round(value / self.median_tpe, 2))
                    self.ev.add(no, text)
        for name, _, direction, _ in _METRICS:
            bad = self.metric_bad.get(name, [])
            if len(bad) >= 2 or (bad and len(bad) == self.metric_seen.get(name)):
                return name, (max(bad) if direction == "high" else min(bad))
        return None

    def finish(self, ctx: Context) -> list[Finding]:
        metric = self._metric_verdict()
        if not self.bad and not metric:
            return []
        f: dict[str, Any] = {"observations": self.observations + sum(self.metric_seen.values()),
                             "imbalanced_observations": self.bad + sum(len(v) for v in self.metric_bad.values())}
        parts = []
        if metric:
            f["routing_metric"], f["routing_value"] = metric
            parts.append(f"the trainer's {metric[0]} reads {metric[1]:g}, outside its healthy range")
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
            unit = "EP ranks" if self.per_rank else "experts"
            parts.append(f"{unit[:-1]} load is {dev:.0%} off the mean (limit 20%); hot {unit} {f['hot_experts']}")
        if self.worst_drop and self.worst_drop[0] > DROP_LIMIT:
            f["drop_rate"] = round(self.worst_drop[0], 4)
            parts.append(f"{self.worst_drop[0]:.1%} of tokens dropped (limit 10%)")
        return [Finding(symptom="moe_imbalance", rule="moe_imbalance.routing", severity="warning", confidence=0.85,
                        title="MoE routing is imbalanced: " + "; ".join(parts), evidence=self.ev.items, facts=f,
                        first_line=self.ev.first())]


PARSERS = (MoeParser,)
