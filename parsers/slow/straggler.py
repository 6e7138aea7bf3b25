"""straggler: one rank or node slower than the rest, which every collective then waits for. Read from what the
straggler detectors print, since a collective makes every rank's step time equal in ordinary step lines:

- NVIDIA Resiliency Extension (its Lightning callback, NeMo, Megatron Bridge): "GPU relative performance:" reports
  ("Rank=76 Node=h100-… Score=0.94", 1.0 = the best; every rank when they are few, else the worst and best few) and
  "STRAGGLER DETECTION WARNING: … Affected ranks: {76, 13}" (a list in some versions).
- Megatron's `--log-straggler` (megatron.core.utils.StragglerDetector): "| MnRtt/Rnk: 3453.08ms/8 | MxRtt/Rnk:
  3468.20ms/0 | … MnClk/Rnk: 1950MHz/28 | MxClk/Rnk: 1980MHz/0 | …" once a logging interval, per-rank time in the
  traced forward ops (min and max with their ranks), and "^^^^ Bottom N Ranks with lowest  Etpt(TF): 296.02/0, …".
- Megatron's GPU sniff test (`--gpu-sniff-test-interval`, or run alone): each micro-benchmark's spread ("  GEMM
  throughput (8192x8192x8192, bf16) [TFLOP/s/GPU]: median=781.40, …") and its outliers ("    OUTLIER rank 13
  (node-2): 601.68 (-23.0%)"). Only a rank below the median counts, and a 1 MB message's bandwidth (latency
  jitter) does not on its own."""
from __future__ import annotations

from collections import Counter
from statistics import median
from typing import Any

from core import facts as F
from core.models import Finding
from parsers.scan.base import Context, Hit, Parser, ranks_text, rx, search

NVRX_THRESHOLD = 0.7    # NVRx's default gpu_relative_perf_threshold: a score below it marks a straggler
SPREAD_BAD = 0.10       # Megatron's detector: the slowest rank's time 10% over the fastest one's
_WARNING = rx(r"STRAGGLER DETECTION WARNING: Some GPUs (have worse relative performance|performance dropped)\."
              r"\s*Affected ranks: [\[{]([\d,\s]*)[\]}]")   # a set ({76, 13}) or a list, as versions print it
_SECTION = rx(r"GPU (relative|individual) performance:")
_WORST = rx(r"Worst performing \d+/(\d+) ranks")
_RANK_ROW = rx(r"^\s*Rank=(\d+)\s+Node=(\S+)\s+Score=([\d.]+)")
_DETECTOR = rx(r"MnRtt/Rnk: ([\d.]+)ms/(\d+) \| MxRtt/Rnk: ([\d.]+)ms/(\d+)")
_CLOCK = rx(r"MnClk/Rnk: ([\d.]+)MHz/(\d+) \| MxClk/Rnk: ([\d.]+)MHz/(\d+)")
_BOTTOM = rx(r"Bottom\s+\d+ Ranks with lowest\s+Etpt\(TF\):\s*(.*)")
_SNIFF_METRIC = rx(r"((?:GEMM throughput|All-reduce busbw|Reduce-scatter busbw|All-to-all busbw|Send/recv busbw) "
                   r"\(.*?\)) \[(TFLOP/s/GPU|GB/s)\]: median=")
_SNIFF_OUTLIER = rx(r"OUTLIER rank (\d+)(?: \(([^)]*)\))?: [-\d.]+ \(([-+][\d.]+)%\)")
_SNIFF_SMALL = rx(r"\b(\d+) MB\b")
SNIFF_MIN_MB = 100   # a sniff-test bandwidth at a smaller message measures latency, too noisy to name a node alone


class StragglerParser(Parser):
    name = "straggler"
    triggers = ("STRAGGLER DETECTION WARNING", "GPU relative performance", "GPU individual performance",
                "Worst performing", "Best performing", "Rank=", "MnRtt/Rnk", "Ranks with lowest",
                "[TFLOP/s/GPU]: median=", "[GB/s]: median=", "OUTLIER rank ")

    def __init__(self) -> None:
        super().__init__()
        self.warned: dict[int, str] = {}            # rank -> "relative" or "individual", from warning lines
        self.warnings: set[str] = set()
        self.section: tuple[str, bool] = ("", False)   # (which report, inside its worst-performing list)
        self.worst: dict[int, float] = {}            # rank -> lowest relative score listed among the worst
        self.dropped: dict[int, float] = {}          # rank -> lowest individual score (against its own past)
        self.nodes: dict[int, str] = {}
        self.reports: list[tuple[float, int, float | None, float | None, int, str]] = []
        self.bottom: tuple[int, str] | None = None
        self.metric: tuple[str, bool] = ("", False)   # the sniff test's metric being listed, whether it can count
        self.sniffed: dict[int, tuple[float, str, str]] = {}   # rank -> (lowest % below median, metric, host)

    def feed(self, hit: Hit) -> None:
        t = hit.text
        if "Rank=" in t and self._row(t, hit):
            return
        if "median=" in t or "OUTLIER" in t:
            self._sniff(t, hit)
            return
        m = search(_WARNING, t)
        if m:
            kind = "relative" if m.group(1).startswith("have") else "individual"
            for r in m.group(2).replace(",", " ").split():
                self.warned.setdefault(int(r), kind)
            if t not in self.warnings:   # the same warning every report: shown once
                self.warnings.add(t)
                self.ev.hit(hit, t)
            return
        m = search(_SECTION, t)
        if m:   # a small job lists every rank right under the header; a larger one, its worst and best few
            self.section = (m.group(1), True)
            return
        if "performing" in t:
            self.section = (self.section[0], search(_WORST, t) is not None)
            return

        m = search(_DETECTOR, t)
        if m:
            lo, hi = float(m.group(1)), float(m.group(3))
            c = search(_CLOCK, t)
            clock = (float(c.group(3)), float(c.group(1))) if c and c.group(2) == m.group(4) else (None, None)
            if lo > 0:
                self.reports.append((hi / lo - 1, int(m.group(4)), clock[0], clock[1], hit.no, t))
            return
        m = search(_BOTTOM, t)
        if m and self.bottom is None:
            self.bottom = (hit.no, t)

    def _row(self, t: str, hit: Hit) -> bool:
        m = search(_RANK_ROW, t)
        if not m:
            return False
        rank, score = int(m.group(1)), float(m.group(3))
        self.nodes.setdefault(rank, m.group(2))
        kind, listed = self.section
        lowest = self.worst if kind == "relative" else self.dropped
        if listed and kind and score < lowest.get(rank, 2.0):
            lowest[rank] = score
            if score < NVRX_THRESHOLD:
                self.ev.hit(hit, t)
        return True

    def _sniff(self, t: str, hit: Hit) -> None:
        m = search(_SNIFF_METRIC, t)
        if m:
            size = search(_SNIFF_SMALL, m.group(1))
            self.metric = (m.group(1), size is None or int(size.group(1)) >= SNIFF_MIN_MB)
            return
        m = search(_SNIFF_OUTLIER, t)
        name, counts = self.metric
        if not m or not counts or float(m.group(3)) >= 0:
            return
        rank, below = int(m.group(1)), -float(m.group(3))
        if below > self.sniffed.get(rank, (0.0,))[0]:
            self.sniffed[rank] = (below, name, m.group(2) or "")
        self.ev.hit(hit, t)

    def finish(self, ctx: Context) -> list[Finding]:
        return self._nvrx() or self._sniff_test() or self._megatron(ctx)

    def _sniff_test(self) -> list[Finding]:
        if not self.sniffed:
            return []
        slow = sorted(self.sniffed)
        worst = max(self.sniffed.values())
        facts: dict[str, Any] = {"detector": "megatron_sniff_test", "slow_ranks": slow,
                                 "below_median_pct": round(worst[0], 1), "metric": worst[1][:100]}
        hosts = sorted({h for _, _, h in self.sniffed.values() if h})
        if hosts:
            facts[F.LAGGING_HOSTS] = hosts
        what = "GEMM throughput" if worst[1].startswith("GEMM") else "bus bandwidth"
        where = f" on {', '.join(hosts[:4])}" if hosts else ""
        title = (f"Straggler: rank {ranks_text(slow)}{where} {worst[0]:g}% below the median {what} in Megatron's GPU "
                 f"sniff test")
        return [self._finding("straggler.sniff_test", title, facts)]

    def _nvrx(self) -> list[Finding]:
        low_rel = {r for r, s in self.worst.items() if s < NVRX_THRESHOLD}
        low_own = {r for r, s in self.dropped.items() if s < NVRX_THRESHOLD}
        slow = sorted(set(self.warned) | low_rel | low_own)
        if not slow:
            return []
        facts: dict[str, Any] = {"detector": "nvrx", "slow_ranks": slow, "threshold": NVRX_THRESHOLD}
        scores = [self.worst[r] for r in slow if r in self.worst] or [self.dropped[r] for r in slow if r in self.dropped]
        if scores:
            facts["score"] = min(scores)
        hosts = sorted({self.nodes[r] for r in slow if r in self.nodes})
        if hosts:
            facts[F.LAGGING_HOSTS] = hosts
        dropped = not low_rel and all(self.warned.get(r, "individual") == "individual" for r in slow)
        what = "got slower than they were earlier in the run" if dropped else "run slower than their peers"
        where = f" on {', '.join(hosts[:4])}" if hosts else ""
        title = f"Straggler: rank {ranks_text(slow)}{where} {what} (NVRx straggler detection)"
        return [self._finding("straggler.nvrx", title, facts)]

    def _megatron(self, ctx: Context) -> list[Finding]:
        reports = self.reports[1:] if len(self.reports) >= 3 else self.reports   # the first interval warms up
        slow = [r for r in reports if r[0] >= SPREAD_BAD]
        if not slow or 2 * len(slow) < len(reports):
            return []
        rank, n = Counter(r[1] for r in slow).most_common(1)[0]
        if 2 * n < len(slow):
            return []   # a different rank each time: jitter, not one slow GPU
        mine = [r for r in slow if r[1] == rank]
        facts: dict[str, Any] = {"detector": "megatron", "slow_ranks": [rank], "reports": len(reports),
                                 "slow_reports": len(slow), "slowdown_pct": round(100 * median(r[0] for r in mine), 1)}
        clocks = [(r[2], r[3]) for r in mine if r[2] is not None]
        if clocks and median(c[1] for c in clocks) < 0.9 * median(c[0] for c in clocks):
            facts["clock_mhz"] = round(median(c[1] for c in clocks))
            facts["fleet_clock_mhz"] = round(median(c[0] for c in clocks))
        host = ctx.rank_hosts.get(rank)
        if host:
            facts[F.LAGGING_HOSTS] = [host]
        for r in mine[:3]:
            self.ev.add(r[4], r[5])
        if self.bottom:
            self.ev.add(*self.bottom)
        clock = (f"; its GPU clock is {facts['clock_mhz']:g} MHz against {facts['fleet_clock_mhz']:g} MHz on the fastest"
                 if "clock_mhz" in facts else "")
        title = (f"Straggler: rank {rank}{' on ' + host if host else ''} takes {facts['slowdown_pct']:g}% longer than the "
                 f"fastest rank in {len(slow)} of {len(reports)} straggler reports{clock}")
        return [self._finding("straggler.megatron_detector", title, facts)]

    def _finding(self, rule: str, title: str, facts: dict[str, Any]) -> Finding:
        return Finding(symptom="straggler", rule=rule, title=title, severity="warning", confidence=0.8,
                       evidence=self.ev.items, facts=facts, first_line=self.ev.first() if self.ev.items else 0)


PARSERS = (StragglerParser,)
