"""nccl_timeout: watchdog timeouts of every PyTorch generation, heartbeat-monitor aborts, store/barrier timeouts,
and a torchrun summary where every rank died of SIGABRT. Works out which ranks are behind."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.models import Finding
from parsers.scan.base import Context, Hit, Parser, rank_of, ranks_text, rx, search
from parsers.hang_reports import TRIGGERS as MISSING_TRIGGERS, MissingRanks

GPUS_PER_NODE = 8   # p4d, p5, p5en and p6 alike: a larger world spans several nodes
_WORK = rx(r"WorkNCCL\((?:SeqNum=(\d+),\s*)?OpType=(\w+)(?:.*?Timeout\(ms\)=(\d+))?.*?\)"
           r"(?:\s*ran for (\d+) milliseconds)?")
_STATE = rx(r"(?:watchdog at work|Timeout at NCCL work|watchdog at work sequence id):? (-?\d+)[,.]?\s*(?:PG status: )?"
            r"last enqueued (?:NCCL )?work: (-?\d+), last completed (?:NCCL )?work: (-?\d+)")
_HEARTBEAT = rx(r"Heartbeat monitor timed out|watchdog got stuck for (\d+) seconds")
_WORKLIST = rx(r"workMetaList_\.size\(\)\s*=\s*(\d+)")
_ABORTED = rx(r"communicator was aborted on rank (\d+)")
_BARRIER = rx(r"store based barrier on rank: (\d+).*?world_size=(\d+), worker_count=(\d+)"
              r"|Timed out after (\d+) seconds waiting for (?:clients|workers)\. (\d+)/(\d+) (?:clients|workers) joined")
_CONNECT = rx(r"client socket has timed out after (\d+)ms while trying to connect to \(([^,\s]+), (\d+)\)")
_STORE = rx(r"is setting up NCCL communicator and retrieving ncclUniqueId from \[(\d+)\].*?(?:Socket Timeout|timed out|Timeout)")
# a TCPStore get/wait that ran out: "Socket Timeout" before PyTorch 2.5, "wait timeout after <ms>ms, keys: ..." since
# gloo's transport (gloo/transport/tcp/unbound_buffer.cc, pair.cc): a collective or barrier on the gloo backend whose
# peer never sent or received within the process group's timeout
_GLOO = rx(r"Timed out waiting (\d{1,12}) ?ms for (recv|send) operation to complete", needs=("Timed out waiting",))
# (torch elastic's rendezvous giving up on the other nodes is the same wait one level up: RendezvousTimeoutError)
_STORE_WAIT = rx(r"(?:DistStoreError|RuntimeError): (?:Socket Timeout|[Ww]ait timeout after (\d+) ?ms)"
                 r"|rendezvous\.api\.RendezvousTimeoutError|RendezvousTimeoutError: ")
_CHECK_TIMEOUT = "WorkNCCL::checkTimeout"   # a C++ frame only the watchdog's timeout exception carries
_TS = rx(r"\[[EFWI](\d{3,4}) (\d\d:\d\d:\d\d(?:\.\d+)?)|^(?:\S+\s+)?(\d{4}-\d\d-\d\d[ T_]\d\d:\d\d:\d\d(?:[.,]\d+)?)")
_EXIT = rx(r"exitcode\s*:\s*(-?\d+)")
_SUMMARY_RANK = rx(r"^\s*rank\s*:\s*(\d+)")
_SUMMARY_HOST = rx(r"^\s*host\s*:\s*(\S+)")
_PREFIX_HOST = rx(r"^(\S+) \[std(?:err|out)\]")


@dataclass
class _Rank:
    line: int
    seq: int | None = None
    op: str | None = None
    timeout_ms: int | None = None
    elapsed_ms: int | None = None
    enqueued: int | None = None
    completed: int | None = None
    outstanding: int | None = None
    ts: tuple = ()
    host: str | None = None
    kinds: set[str] = field(default_factory=set)


class TimeoutParser(Parser):
    name = "nccl_timeout"
    triggers = ("collective operation timeout", "detected by watchdog", "either an error or timeout",
                "Timeout at NCCL work",
                "Heartbeat monitor timed out", "watchdog got stuck", "communicator was aborted", "store based barrier", "client socket has timed out",
                "clients joined", "retrieving ncclUniqueId", "exitcode", "Root Cause (first observed failure)",
                "operations have failed or timed out", "Socket Timeout", "ait timeout after", "workers joined",
                "Timed out waiting", "RendezvousTimeoutError", *MISSING_TRIGGERS, _CHECK_TIMEOUT)
    before = 4
    after = 4

    def __init__(self) -> None:
        super().__init__()
        self.ranks: dict[int, _Rank] = {}
        self.unranked: _Rank | None = None
        self.skip_to = 0
        self.barrier: dict[str, int] = {}
        self.store_root: int | None = None
        self.connect: dict[str, Any] = {}   # a rank that never reached the rendezvous store
        self.store_wait: dict[str, Any] = {}   # a store get/wait that timed out
        self.holds_host: str | None = None   # set when this log is one node's own share of a multi-node job
        self.exits: dict[int, int] = {}
        self.exit_hosts: dict[int, str] = {}
        self.root_next = False
        self.root_rank: int | None = None
        self.generic = 0
        self.missing = MissingRanks()

    def _rec(self, rank: int | None, line: int) -> _Rank:
        if rank is None:
            if self.unranked is None:
                self.unranked = _Rank(line)
            return self.unranked
        return self.ranks.setdefault(rank, _Rank(line))

    def feed(self, hit: Hit) -> None:
        if hit.no <= self.skip_to:
            return
        t = hit.text
        if "Root Cause (first observed failure)" in t:
            self.root_next = True
            return
        if "exitcode" in t:
            self._exit(hit)
            return
        if "collective operation timeout" in t and "before timing out" not in t:
            t = self._join(hit, "before timing out")
        elif ("either an error or timeout" in t or "Timeout at NCCL work" in t or "detected by watchdog" in t) \
                and "last completed" not in t:
            t = self._join(hit, "last completed")
        rank = rank_of(hit.label + t)
        m = search(_ABORTED, t)
        if m:
            rank = int(m.group(1))
        if "operations have failed or timed out" in t:
            self.generic += 1
            self.ev.hit(hit)
            return
        matched = False
        if _CHECK_TIMEOUT in t:
            self._rec(rank, hit.no).kinds.add("watchdog")
            matched = True
        m = search(_WORK, t) if "WorkNCCL" in t else None
        if m and "timeout" in t:
            r = self._rec(rank, hit.no)
            r.kinds.add("watchdog")
            r.seq = int(m.group(1)) if m.group(1) else r.seq
            r.op = m.group(2)
            r.timeout_ms = int(m.group(3)) if m.group(3) else r.timeout_ms
            r.elapsed_ms = int(m.group(4)) if m.group(4) else r.elapsed_ms
            matched = True
        m = search(_STATE, t)
        if m:
            r = self._rec(rank, hit.no)
            r.kinds.add("watchdog")
            r.seq = r.seq if r.seq is not None else int(m.group(1))
            r.enqueued, r.completed = int(m.group(2)), int(m.group(3))
            matched = True
        m = search(_GLOO, t)
        if m:
            r = self._rec(rank, hit.no)
            r.kinds.add("peer_wait")
            r.op = r.op or f"gloo {m.group(2)}"
            r.timeout_ms = int(m.group(1))
            matched = True
        m = search(_HEARTBEAT, t)
        if m:
            r = self._rec(rank, hit.no)
            r.kinds.add("heartbeat")
            if m.group(1):
                r.elapsed_ms = int(m.group(1)) * 1000
            w = search(_WORKLIST, t)
            if w:
                r.outstanding = int(w.group(1))
            matched = True
        matched = self._setup(t, rank, hit.no) or matched
        kind = self.missing.read(hit, t) if "monitoredBarrier" in t or "remainder of ranks" in t else None
        if kind:
            self._rec(0 if rank is None and self.missing.by == "monitored_barrier" else rank, hit.no).kinds.add(kind)
            matched = True
        if not matched:
            return
        r = self._rec(rank, hit.no)
        ts = search(_TS, t) or (search(_TS, hit.cut) if hit.cut else None)
        if ts and not r.ts:
            r.ts = tuple(g for g in ts.groups() if g)
        h = search(_PREFIX_HOST, hit.label + t)
        if h:
            r.host = h.group(1)
        self.ev.hit(hit)

    def _setup(self, t: str, rank: int | None, no: int) -> bool:
        """Process-group set-up and store failures: the barrier, the store connection, store waits."""
        matched = False
        m = search(_BARRIER, t)
        if m:
            if m.group(1):
                self.barrier = {"rank": int(m.group(1)), "world": int(m.group(2)), "joined": int(m.group(3))}
            else:
                self.barrier = {"world": int(m.group(6)), "joined": int(m.group(5)), "waited_s": int(m.group(4))}
            matched = True
        m = search(_CONNECT, t)
        if m:
            self.connect = {"master_addr": m.group(2), "master_port": int(m.group(3)), "waited_s": int(m.group(1)) // 1000}
            self._rec(rank, no).kinds.add("store")
            matched = True
        m = search(_STORE_WAIT, t)
        if m:
            self.store_wait = {"waited_s": int(m.group(1)) // 1000} if m.group(1) else {"waited_s": None}
            self._rec(rank, no).kinds.add("store")
            matched = True
        m = search(_STORE, t)
        if m:
            self.store_root = int(m.group(1))
            self._rec(rank, no).kinds.add("store")
            matched = True
        return matched

    def _join(self, hit: Hit, marker: str) -> str:
        """Glue terminal-wrapped continuation lines back on, up to the one holding `marker`."""
        t = hit.text
        for i, nxt in enumerate(hit.after):
            t += nxt
            if marker in nxt:
                self.skip_to = hit.no + i + 1
                break
        return t

    def _exit(self, hit: Hit) -> None:
        m = search(_EXIT, hit.text)
        if not m:
            return
        rank = None
        for line in reversed(hit.before):
            rm = search(_SUMMARY_RANK, line)
            if rm:
                rank = int(rm.group(1))
                break
        if rank is None:
            return
        self.exits[rank] = int(m.group(1))
        hm = next((search(_SUMMARY_HOST, x) for x in hit.before if search(_SUMMARY_HOST, x)), None)
        if hm:
            self.exit_hosts[rank] = hm.group(1)
        if self.root_next:
            self.root_rank, self.root_next = rank, False
        if len(self.ev.items) < 2:
            self.ev.hit(hit)

    def finish(self, ctx: Context) -> list[Finding]:
        recs = {r: v for r, v in self.ranks.items()}
        if recs or self.unranked or self.barrier or self.store_root is not None or self.connect or self.store_wait:
            return [self._watchdog_finding(recs, ctx)]
        if self.exits and all(code == -6 for code in self.exits.values()):
            return [self._sigabrt_finding()]
        if self.generic:
            return [Finding(symptom="nccl_timeout", rule="nccl_timeout.generic", severity="error", confidence=0.6,
                            title="PyTorch reports NCCL operations that failed or timed out",
                            evidence=self.ev.items, facts={}, first_line=self.ev.first())]
        return []

    def _watchdog_finding(self, recs: dict[int, _Rank], ctx: Context) -> Finding:
        everyone = list(recs.values()) + ([self.unranked] if self.unranked else [])
        f: dict[str, Any] = {}
        ops = {r.op for r in everyone if r.op}
        if ops:
            f["op_type"] = sorted(ops)[0] if len(ops) == 1 else sorted(ops)
        seqs = {k: v.seq for k, v in recs.items() if v.seq is not None}
        all_seqs = [r.seq for r in everyone if r.seq is not None]
        if all_seqs:
            f["seq_num"] = max(all_seqs)
        if seqs and len(set(seqs.values())) > 1:
            f["seq_by_rank"] = {str(k): v for k, v in sorted(seqs.items())}
        tmo = [r.timeout_ms for r in everyone if r.timeout_ms]
        if tmo:
            f["timeout_ms"] = max(tmo)
        el = [r.elapsed_ms for r in everyone if r.elapsed_ms]
        if el:
            f["elapsed_ms"] = max(el)
        f["reporting_ranks"] = sorted(recs)
        lagging, why = self._lagging(recs, ctx)
        f["lagging_ranks"] = lagging
        if why:
            f["lagging_reason"] = why
        hosts = {**ctx.rank_hosts, **{k: v.host for k, v in recs.items() if v.host}}
        if hosts and lagging:
            f["lagging_hosts"] = sorted({hosts[r] for r in lagging if r in hosts})
        if self.holds_host:
            f["log_holds_host"] = self.holds_host
        first = self._first(recs)
        if first is not None:
            f["first_failure_rank"] = first
        if self.barrier:
            f["barrier"] = self.barrier
        f = {**self.missing.facts(), **f}
        if self.store_root is not None:
            f["store_root_rank"] = self.store_root
        f.update(self.connect)
        if self.store_wait.get("waited_s") is not None and "waited_s" not in f:
            f["waited_s"] = self.store_wait["waited_s"]
        kinds = set().union(*(r.kinds for r in everyone)) if everyone else set()
        if ctx.world_size:
            f["world_size"] = ctx.world_size
        rule = ("nccl_timeout.watchdog" if "watchdog" in kinds else "nccl_timeout.heartbeat" if "heartbeat" in kinds
                else "nccl_timeout.peer_wait" if "peer_wait" in kinds
                else "nccl_timeout.stall" if "stall" in kinds
                else "nccl_timeout.store" if self.store_root is not None or self.connect or self.store_wait
                else "nccl_timeout.barrier")
        return Finding(symptom="nccl_timeout", rule=rule, title=self._title(f, rule), severity="critical",
                       confidence=0.95, evidence=self.ev.items, facts=f, first_line=self.ev.first())

    def _lagging(self, recs: dict[int, _Rank], ctx: Context) -> tuple[list[int], str | None]:
        if self.missing.count and self.missing.by:
            return self.missing.lagging()
        seqs = {k: v.seq for k, v in recs.items() if v.seq is not None}
        if len(set(seqs.values())) > 1:
            low = min(seqs.values())
            return sorted(k for k, v in seqs.items() if v == low), \
                f"stuck on an earlier collective (SeqNum {low} vs {max(seqs.values())})"
        top = max(seqs.values(), default=None)
        enq = {k: v.enqueued for k, v in recs.items() if v.enqueued is not None}
        if top is not None and enq and any(v < top for v in enq.values()):
            return sorted(k for k, v in enq.items() if v < top), f"never enqueued SeqNum {top}"
        comp = {k: v.completed for k, v in recs.items() if v.completed is not None}
        if len(set(comp.values())) > 1:
            low = min(comp.values())
            return sorted(k for k, v in comp.items() if v == low), \
                f"completed fewer collectives (last completed {low} vs {max(comp.values())})"
        out = {k: v.outstanding for k, v in recs.items() if v.outstanding is not None}
        if len(set(out.values())) > 1:
            low = min(out.values())
            return sorted(k for k, v in out.items() if v == low), \
                f"fewer collectives queued than its peers ({low} vs {max(out.values())})"
        if self.connect:
            c = self.connect
            return [], (f"could not reach the rendezvous store at {c['master_addr']}:{c['master_port']} in "
                        f"{c['waited_s']} s (MASTER_ADDR or the port unreachable, or rank 0 never started it)")
        if self.store_wait:
            took = self.store_wait["waited_s"]
            if took is None:
                return [], ("the rendezvous store (TCPStore) did not answer in time: its host or port unreachable, "
                            "or a peer died or never started")
            return [], (f"a TCPStore request waited {took} s for a key no peer wrote: a peer died, hung or never "
                        "started")
        if self.barrier:
            missing = self.barrier["world"] - self.barrier["joined"]
            if missing > 0:
                return [], f"{missing} of {self.barrier['world']} ranks never joined the barrier"
        world = ctx.world_size
        if world and recs and len(recs) >= world / 2 and max(recs) < world:
            silent = sorted(set(range(world)) - set(recs))
            if len(ctx.hosts) == 1 and world > GPUS_PER_NODE and not any(r in ctx.rank_hosts for r in silent):
                # one node's own log of a multi-node job: the other ranks are in the other nodes' logs
                host = next(iter(ctx.hosts))
                who = f"rank {silent[0]} never appears" if len(silent) == 1 else \
                    f"ranks {ranks_text(silent, 8)} never appear"
                self.holds_host = host
                return [], (f"{who} in this log, which holds {host}'s ranks only; every node's log is needed to "
                            "see which rank is behind")
            if 0 < len(silent) <= 8:
                return silent, "never reported a timeout (likely the stuck or dead rank)"
        if not world and len(recs) >= 4 and min(recs) == 0:   # no world size: a hole in the run 0..max
            hi = max(recs)
            gaps = sorted(set(range(hi + 1)) - set(recs))
            if 0 < len(gaps) <= max(1, (hi + 1) // 8):
                return gaps, "missing from an otherwise unbroken run of reporting ranks (likely the stuck or dead rank)"
        return [], None

    def _first(self, recs: dict[int, _Rank]) -> int | None:
        timed = {k: v.ts for k, v in recs.items() if v.ts}
        if timed:
            return min(timed, key=lambda k: (timed[k], k))
        if recs:
            return min(recs, key=lambda k: recs[k].line)
        return None

    @staticmethod
    def _title(f: dict[str, Any], rule: str) -> str:
        op = f.get("op_type")
        op = op if isinstance(op, str) else "/".join(op) if op else "A collective"
        ranks = f["reporting_ranks"]
        if rule == "nccl_timeout.heartbeat":
            head = "ProcessGroupNCCL heartbeat monitor aborted the job: the watchdog made no progress"
        elif f.get("missing_reported_by") == "horovod":
            head = "Horovod's stall inspector: a collective waits on ranks that never submitted it"
        elif f.get("missing_reported_by") == "monitored_barrier":
            head = "monitored_barrier timed out"
        elif "master_addr" in f:
            head = "Process-group setup failed"
        elif rule == "nccl_timeout.store" and "store_root_rank" not in f:
            head = "Rendezvous store timeout"
        elif rule in ("nccl_timeout.barrier", "nccl_timeout.store"):
            head = "Process-group setup timed out waiting for ranks to join"
        else:
            head = f"{op} timed out"
            if f.get("timeout_ms"):
                head += f" after {f['timeout_ms'] // 1000} s"
        if ranks:
            head += f" on {len(ranks)} rank{'s' if len(ranks) > 1 else ''} ({ranks_text(ranks, 8)})"
        if f.get("seq_num") is not None and "seq_by_rank" not in f:
            head += f" at SeqNum {f['seq_num']}"
        lag = f.get("lagging_ranks")
        if lag:
            head += f"; rank {ranks_text(lag, 8)} {'is' if len(lag) == 1 else 'are'} behind: {f['lagging_reason']}"
        elif f.get("lagging_reason"):
            head += f"; {f['lagging_reason']}"
        elif ranks and rule == "nccl_timeout.watchdog":
            head += "; every reporting rank waits on a peer that did not log: look for the rank missing from this list"
        return head

    def _sigabrt_finding(self) -> Finding:
        ranks = sorted(self.exits)
        f: dict[str, Any] = {"exit_code": -6, "aborted_ranks": ranks, "reporting_ranks": ranks, "lagging_ranks": []}
        if self.root_rank is not None:
            f["first_failure_rank"] = self.root_rank
        if self.exit_hosts:
            f["hosts"] = sorted(set(self.exit_hosts.values()))
        return Finding(symptom="nccl_timeout", rule="nccl_timeout.sigabrt_summary", severity="error", confidence=0.5,
                       title=f"All {len(ranks)} ranks in the torchrun summary died of SIGABRT, which is how the NCCL "
                             "watchdog ends a hung collective; the watchdog lines themselves are not in this excerpt",
                       evidence=self.ev.items, facts=f, first_line=self.ev.first())


PARSERS = (TimeoutParser,)
