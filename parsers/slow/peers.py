"""straggler from values that peers report side by side, whatever program printed them — one mechanism for three
layouts:

- a map on one line from peer to value: "node elapsed time are {2: 20.3, 3: 20.2, 0: 206.8, 1: 151.7}";
- a table whose first column is the peer (rank, node, worker, host) under a header of column names: each numeric
  column is compared across its rows ("rank  data_time  step_time" from a run analyser);
- the same line printed by every worker at the same step, without its id: "Epoch[0] Batch [200] Speed: 816.11
  samples/sec" beside two workers at 1317 (a throughput), grouped by the line's shape and its step numbers;
- per-rank step lines with timed phases: "[rank3] step 6 | fwd_bwd 493.4 ms | allreduce 26.6 ms" beside the other
  ranks' lines of the same step: each phase compared across the ranks at each step, and a rank slow at most of
  them is the straggler (a synchronised phase, equal on every rank, never makes one).

A time (or latency) far above the peers' median, or a throughput far below it, makes a straggler; the median leaves
room for a few slow peers, never for half of them."""
from __future__ import annotations

import re
from statistics import median

from core.models import Finding
from parsers.scan.base import Context, EvidenceBox, Hit, Parser, rank_of, ranks_text

TIME_SLOW = 1.5     # a peer's time this many times the median of its peers
PAIR_SLOW = 2.0     # with two peers, this many times the other's
PHASE_MIN_MS = 10.0   # and at least this much longer (a rank's logging taking 3 ms against 0.2 ms is no straggler)
MAP_MIN_S = 1.0       # a peer map's or table's time: at least this much above the median (its unit is seconds)
RATE_SLOW = 0.7     # a peer's throughput this fraction of the median or less
MIN_PEERS = 3

_MAP = re.compile(r"\{\s*(\d{1,6}\s*:\s*-?\d{1,12}(?:\.\d+)?(?:\s*,\s*\d{1,6}\s*:\s*-?\d{1,12}(?:\.\d+)?){2,})\s*,?\s*\}")
_RATE = re.compile(r"(-?\d+(?:\.\d+)?)\s*(samples/s(?:ec)?|samples per second|tokens/s(?:ec)?|tok/s|img/s|"
                   r"images/s(?:ec)?|sequences/s(?:ec)?)", re.I)
_NUM = re.compile(r"-?\d+(?:\.\d+)?")
_PEER_HEAD = re.compile(r"^\s*(rank|node|worker|host|gpu)\s+(\S.*)$", re.I)
MAX_GROUPS = 4096
GROUP_CAP = 64
MAX_SCAN = 1024   # the plain-re patterns read a line's first KiB (a step line is short; a 1 MB line must not cost seconds)
_WAITING = ("reduce", "gather", "scatter", "broadcast", "comm", "sync", "wait", "barrier", "nccl", "gloo", "all2all",
            "alltoall", "p2p", "send", "recv")
_STEP_NO = re.compile(r"(?i)\b(?:step|iter(?:ation)?)\s*[:=]?\s*(\d{1,9})\b(?!\.\d|\s*m?s\b)")
_PROCESS = re.compile(r"\[(?:process|proc|worker)\s*(\d{1,5})(?:\s*/\s*\d{1,5})?\]", re.I)
_PHASE = re.compile(r"(?i)\b([a-z][\w/-]*?)\s*[:=]?\s+(\d+(?:\.\d+)?)\s*(ms|s)\b")


_TIME_KEY = re.compile(r"(?i)(?:\b|_)(?:time|elapsed|latency|duration|secs?)\b|\(s\)|\(ms\)|(?<=\w)_(?:s|ms)\b")


def _time_like(text: str) -> bool:
    """Whether a key or line names a time: a word (time, elapsed, latency), or a unit marked as one ('(ms)', '_s')
    — not a substring of "params" or "num_samples"."""
    return _TIME_KEY.search(text) is not None


class PeerParser(Parser):
    name = "slow_peers"
    # (a peer table's header has its column names apart: "rank   data_time"; tqdm's it/s is a single process's)
    triggers = (" ms ", " ms,", *(f"{d}ms " for d in range(10)), "{0:", "{1:", "{2:", "{3:", "rank  ", "node  ",
                "worker  ", "host  ", "rank\t", "node\t", "Rank  ", "Node  ", "Worker  ", "samples/s", "samples per second", "tokens/s", "tok/s", "img/s", "images/s",
                "sequences/s")
    after = 40

    def __init__(self) -> None:
        super().__init__()
        # slowdown, (peer kind, slow peers) or None, metric, line, text
        self.best: tuple[float, tuple[str, list[int]] | None, str, int, str] | None = None
        self.groups: dict[tuple, list[tuple[float, int, str]]] = {}
        self.phases: dict[tuple[str, int], dict[int, tuple[float, int, str]]] = {}   # (phase, step) -> rank -> time
        self.done_to = 0

    def _offer(self, slowdown: float, peers: tuple[str, list[int]] | None, metric: str, no: int, text: str) -> None:
        if self.best is None or slowdown > self.best[0]:
            self.best = (slowdown, peers, metric, no, text)

    def _phase_line(self, hit: Hit) -> bool:
        """A rank's step line with timed phases (see the module's docstring); True when it was one."""
        rank = rank_of(hit.label + hit.text)
        if rank is None and (p := _PROCESS.search(hit.text[:80])):
            rank = int(p.group(1))   # a script's own "[process 1/2]" / "[worker 3]" label
        if rank is None:
            return False
        t = hit.text
        step = _STEP_NO.search(t)
        if not step:
            return False
        for m in _PHASE.finditer(t[:MAX_SCAN]):
            if len(self.phases) >= MAX_GROUPS:
                break
            ms = float(m.group(2)) * (1000.0 if m.group(3).lower() == "s" else 1.0)
            self.phases.setdefault((m.group(1).lower(), int(step.group(1))), {})[rank] = (ms, hit.no, hit.text)
        return True

    def feed(self, hit: Hit) -> None:
        if "ms" in hit.text and self._phase_line(hit):
            return
        t = hit.text
        if "{" in t and _time_like(t):
            m = _MAP.search(t)
            if m:
                pairs = [p.split(":") for p in m.group(1).split(",")]
                peer = "node" if "node" in t.lower() else "rank" if "rank" in t.lower() else "peer"
                self._judge({int(k): float(v) for k, v in pairs}, peer, "elapsed time", hit.no, hit.text)
                return
        if hit.no > self.done_to and (h := _PEER_HEAD.match(t)):
            self._table(hit, h)
            return
        r = _RATE.search(t[:MAX_SCAN])
        if r and len(self.groups) < MAX_GROUPS:
            shape = _NUM.sub("#", t[:r.start()]) + r.group(2)
            steps = tuple(x for x in _NUM.findall(t[:r.start()]) if "." not in x)
            if not steps:
                return   # no step to line workers up by: one worker's series over time, not peers
            group = self.groups.setdefault((shape, steps), [])
            if len(group) < GROUP_CAP:   # peers print a step's line once each: a long group is one worker over time
                group.append((float(r.group(1)), hit.no, hit.text[:500]))

    def _table(self, hit: Hit, head: re.Match) -> None:
        names = head.group(2).split()
        rows: dict[int, list[float]] = {}
        last = hit.no
        for i, line in enumerate(hit.after):
            cells = line.split()
            if len(cells) != len(names) + 1 or not cells[0].isdigit() or not all(_NUM.fullmatch(c) for c in cells[1:]):
                if rows:
                    break
                continue
            rows[int(cells[0])] = [float(c) for c in cells[1:]]
            last = hit.no + i + 1
        self.done_to = last
        if len(rows) < MIN_PEERS:
            return
        for k, name in enumerate(names):
            if _time_like(name):
                self._judge({p: v[k] for p, v in rows.items()}, head.group(1).lower(), name, hit.no, hit.text)

    def _judge(self, values: dict[int, float], peer: str, metric: str, no: int, text: str) -> None:
        """Times per peer: the peers far above the median (fewer than half of them) are the stragglers."""
        if len(values) < MIN_PEERS:
            return
        med = median(values.values())
        slow = sorted(p for p, v in values.items() if v >= TIME_SLOW * max(med, 1e-9) and v - med >= MAP_MIN_S)
        if slow and 2 * len(slow) < len(values):
            # (a median near zero — ranks that prefetch — gives no ratio worth printing: capped at 100x)
            self._offer(min(max(values.values()) / max(med, 1e-9) - 1, 100.0), (peer, slow), metric, no, text)

    def _judge_phases(self) -> None:
        by_phase: dict[str, list[dict[int, tuple[float, int, str]]]] = {}
        for (phase, _), ranks in self.phases.items():
            if len(ranks) >= 2:
                by_phase.setdefault(phase, []).append(ranks)
        for phase, steps in by_phase.items():
            if any(w in phase for w in _WAITING):
                continue   # time spent waiting for the others: the straggler's peers wait longest, not the straggler
            slow_at: dict[int, list[tuple[float, int, str]]] = {}
            for ranks in steps:
                for r, v in ranks.items():
                    ref = median(x[0] for q, x in ranks.items() if q != r)   # the other ranks at this step
                    bar = TIME_SLOW if len(ranks) > 2 else PAIR_SLOW
                    if ref > 0 and v[0] >= bar * ref and v[0] - ref >= PHASE_MIN_MS:
                        slow_at.setdefault(r, []).append((v[0] / ref - 1, v[1], v[2]))
            # slow at three steps in four or more (jitter on a busy host makes a rank slow now and then)
            slow = sorted(r for r, hits in slow_at.items() if len(hits) >= 2 and 4 * len(hits) >= 3 * len(steps))
            n = max(len(x) for x in steps)
            if len(slow) > 1 and 2 * len(slow) >= n:
                continue   # half of the ranks or more: no single straggler (one of two is one rank)
            if slow:
                worst = max(h for r in slow for h in slow_at[r])
                self._offer(worst[0], ("rank", slow), phase, worst[1], worst[2])

    def finish(self, ctx: Context) -> list[Finding]:
        self._judge_phases()
        for (shape, _), vals in self.groups.items():
            if len(vals) < MIN_PEERS:
                continue
            med = median(v for v, _, _ in vals)
            low = min(vals)
            if med > 0 and low[0] <= RATE_SLOW * med and sum(v <= RATE_SLOW * med for v, _, _ in vals) * 2 < len(vals):
                unit = _RATE.search(low[2])
                self._offer(1 - low[0] / med, None, unit.group(2) if unit else "throughput", low[1], low[2])
        if self.best is None:
            return []
        slowdown, peers, metric, no, text = self.best
        self.ev.add(no, text)
        pct = round(100 * slowdown, 1)
        facts = {"detector": "peer_values", "metric": metric[:60], "slowdown_pct": pct}
        if peers:
            kind, ids = peers
            if kind in ("rank", "node"):
                facts["slow_ranks" if kind == "rank" else "slow_nodes"] = ids[:32]
            title = (f"A straggler: {kind}(s) {ranks_text(ids)} take up to {pct:g}% longer than the median of their "
                     f"peers ({metric[:40]})")
        else:
            title = (f"A straggler: one worker's throughput is {pct:g}% below its peers' median at the same step "
                     f"({metric[:40]}; the line does not name the worker)")
        return [Finding(symptom="straggler", rule="straggler.peer_values", title=title, severity="warning",
                        confidence=0.6, evidence=self.ev.items, facts=facts, first_line=self.ev.first())]


PARSERS = (PeerParser,)
