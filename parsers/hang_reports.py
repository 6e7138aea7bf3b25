"""Ranks that a hang's own reporter names as not arrived: gloo's monitored_barrier on rank 0, and Horovod's stall
inspector. One stall report is advisory (Horovod warns and goes on); a rank named again is stuck."""
from __future__ import annotations

from typing import Any

from parsers.scan.base import Hit, rx, search

# torch.distributed.monitored_barrier (and ProcessGroupWrapper under TORCH_DISTRIBUTED_DEBUG=DETAIL): rank 0 names
# the ranks that did not arrive ("Rank 3 failed to pass monitoredBarrier in 30000 ms"; with wait_all_ranks
# "Ranks 1, 3 failed …"); the others say they waited on rank 0
_MONITORED = rx(r"Ranks? (\d+(?:, ?\d+)*) failed to pass monitoredBarrier(?: in (\d+) ?ms)?",
                needs=("monitoredBarrier",))
MONITORED_PEER = "successfully reached monitoredBarrier"
# Horovod's stall inspector: a collective some ranks submitted waits for the rest. The ranks follow, one
# "<rank>: [tensor, …]" line each under "Missing ranks:" / "Stalled ranks:", or as "<op> [missing ranks: 3, 5]"
# under "Stalled ops:"
_STALL = rx(r"waiting for remainder of ranks for more than (\d+) seconds", needs=("remainder of ranks",))
_STALL_RANK = rx(r"^\s*(\d+): \[")
_STALL_OP = rx(r"\[missing ranks: (\d+(?:, ?\d+)*)\]", needs=("missing ranks",))
TRIGGERS = ("monitoredBarrier", "remainder of ranks")


class MissingRanks:
    """Fed the lines holding TRIGGERS; says which ranks were named missing, by whom, and how often."""

    def __init__(self) -> None:
        self.count: dict[int, int] = {}   # rank -> reports naming it
        self.wait_s: int | None = None
        self.by: str | None = None   # "monitored_barrier" or "horovod"

    def _name(self, ranks) -> None:
        for r in ranks:
            self.count[int(r)] = self.count.get(int(r), 0) + 1

    def read(self, hit: Hit, t: str) -> str | None:
        """The kind of wait this line reports ("peer_wait", "stall"), or None: not one, or an advisory stall."""
        m = search(_MONITORED, t)
        if m:
            self._name(m.group(1).split(","))
            if m.group(2):
                self.wait_s = int(m.group(2)) // 1000
            self.by = "monitored_barrier"
            return "peer_wait"
        if MONITORED_PEER in t:
            return "peer_wait"
        m = search(_STALL, t)
        if not m:
            return None
        self.wait_s, self.by = int(m.group(1)), "horovod"
        self._name(self._stalled(hit.after_labelled))
        return "stall" if self.count and max(self.count.values()) > 1 else None

    @staticmethod
    def _stalled(after: list[str]) -> list[str]:
        ranks, listed = [], False
        for nxt in after:
            if nxt.rstrip().endswith(("ranks:", "ops:")):   # the list's heading
                listed = True
                continue
            if not listed:
                continue
            rm = search(_STALL_RANK, nxt) or search(_STALL_OP, nxt)
            if not rm:
                break
            ranks += rm.group(1).split(",")
        return ranks

    def lagging(self) -> tuple[list[int], str]:
        ranks = sorted(self.count)
        times = max(self.count.values())
        again = f" (named in {times} reports)" if times > 1 else ""
        if self.by == "horovod":
            waited = f" for over {self.wait_s} s" if self.wait_s is not None else ""
            return ranks, f"the others have waited on it{waited} without it submitting the collective{again}"
        waited = f" within {self.wait_s} s" if self.wait_s is not None else ""
        return ranks, f"did not reach the monitored barrier{waited}{again}"

    def facts(self) -> dict[str, Any]:
        f: dict[str, Any] = {"missing_reported_by": self.by} if self.by else {}
        if self.by and self.wait_s is not None:
            f["timeout_ms"] = self.wait_s * 1000
        return f
