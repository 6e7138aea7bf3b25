"""What to collect when a message describes a failure but holds no log that decides it: the settings and commands
whose output would, by the kind of trouble the words name ("it hangs", "loss spikes", "slow", "EFA", "OOM")."""
from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Ask:
    kind: str                          # what the words are about
    items: tuple[tuple[str, str], ...]  # (a setting, command or log excerpt to get, what it decides)
    cite: tuple[str, ...]              # runbook sections


_ASKS: tuple[tuple[re.Pattern, Ask], ...] = (
    (re.compile(r"(?i)\b(?:hangs?|hung|stuck|freez\w*|time[sd]? ?out|watchdog|deadlock\w*|no progress)\b"),
     Ask("hang", (("export NCCL_DEBUG=INFO", "which collective and connection stall, and the ranks' hosts"),
                  ("export TORCH_NCCL_TRACE_BUFFER_SIZE=2000 TORCH_NCCL_DUMP_ON_TIMEOUT=1",
                   "a flight-recorder dump of every rank's last collectives when the timeout fires"),
                  ("py-spy dump --pid <trainer pid>", "where each rank's Python is waiting (on every node)"),
                  ("the watchdog lines of every rank (all nodes' logs)", "which rank is behind: its SeqNum is lower")),
         ("hangs#debug-logging", "hangs#flight-recorder", "hangs#find-the-lagging-rank"))),
    (re.compile(r"(?i)\b(?:loss\w*\s+(?:spikes?|jumps?|explod\w*|diverg\w*)|spikes?|nan|inf|diverg\w*|overflow)\b"),
     Ask("loss", (("the loss lines with their iteration numbers, from well before to after the jump",
                   "whether it is a spike that recovers, a NaN, or a slow rise"),
                  ("grad norm and loss scale on the same lines (Megatron --log-* options, HF logging_steps=1)",
                   "whether gradients blew up first or fp16 scaling collapsed"),
                  ("the learning-rate schedule and the data order around that step", "a bad batch or a warm-up end")),
         ("convergence#grad-clipping", "convergence#loss-scale", "convergence#infra-correlation"))),
    (re.compile(r"(?i)\b(?:slow\w*|throughput|tflops|mfu|utili[sz]ation|idle|samples/s|tokens/s|speed)\b"),
     Ask("slow", (("nvidia-smi dmon -s u -c 30", "whether the GPUs are busy at all"),
                  ("torch.profiler over a few steps: prof.key_averages().table(sort_by='cuda_time_total')",
                   "which phase dominates: GEMMs, NCCL kernels or the DataLoader"),
                  ("all_reduce_perf -b 8 -e 8G -f 2 -g 1 (nccl-tests, on the same nodes)",
                   "the bus bandwidth the fabric really gives against what the instance should reach")),
         ("performance#profile-first", "slow#input-bound"))),
    (re.compile(r"(?i)\b(?:efa|tcp|sockets?|ofi|libfabric|infiniband|ib|bandwidth|rdma)\b"),
     Ask("network", (("fi_info -p efa", "whether libfabric sees the EFA devices (inside the container too)"),
                     ("export NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET",
                      "the transport NCCL picked: 'NET/Libfabric' or 'NET/IB' is RDMA, 'NET/Socket' is TCP")),
         ("efa#tcp-fallback", "efa#provider-check"))),
    (re.compile(r"(?i)\b(?:oom|out of memory|memory)\b"),
     Ask("memory", (("the whole OOM message ('Tried to allocate … GPU n has a total capacity …')",
                     "how much was asked, free, allocated and reserved but unused"),
                    ("nvidia-smi --query-compute-apps=pid,used_memory --format=csv",
                     "whether another process holds memory on the same GPU")),
         ("oom#read-the-message",))),
)


def asks_for(text: str) -> list[Ask]:
    """The kinds of evidence the words of a message ask for, in a fixed order; none for small talk."""
    return [ask for pat, ask in _ASKS if pat.search(text or "")]


def all_cites() -> set[str]:
    return {c for _, ask in _ASKS for c in ask.cite}
