"""nccl_error: NCCL failures that are not timeouts: result codes, IB completion and QP errors, peers that vanished,
/dev/shm exhaustion, two ranks on one GPU, rings or topologies the ranks disagree on.

Two layers: the precise rules below (rich facts), then a broad one — any `NCCL WARN` line that reports an error,
a failure or something not found — ranked last with a lower confidence, so a message this table does not know yet
still gets an answer."""
from __future__ import annotations

from typing import Any

from core.models import Finding
from parsers.scan.base import Context, Hit, Parser, host_of, rank_of, rx, search

# (rule, pattern, what it means). First match wins per line; order = most specific first.
_RULES = (
    ("efa_completion", rx(r"NET/OFI Request (?:\S+ )?completed with error\. RC: (-?\d+)\.? ?(?:Error: )?([^\n]*)"
                          r"|efa_rdm_\w*handle_\w*error\(\)[^\n]*?err: (\d+), message: ([^\n]*?)(?: My EFA addr| My host id|$)"
                          r"|rxr_cq_write_[rt]x_error\(\)[^\n]*?err: (\d+), prov_err: ([^\n]*?)(?: \(\d+\))?$",
                          needs=("completed with error", "error()"))),
    ("efa_av", rx(r"NET/OFI (?:Unable to insert remote address into address vector|Couldn't open AV)[^\n]*",
                  needs=("address vector", "Couldn't open AV"))),
    ("efa_endpoint", rx(r"NET/OFI (?:Creating new endpoint|Couldn't (?:open|create|bind|enable) (?:endpoint|CQ|domain)|"
                        r"Unable to (?:open|create) (?:domain|endpoint))[^\n]*", needs=("NET/OFI ",))),
    ("ib_completion", rx(r"Got completion (?:from peer (\S+?)(?:<\d+>)? with (?:status=|error )|with error )(\d+)"
                         r".*?vendor err (\d+)", needs=("vendor err",))),
    ("ib_setup", rx(r"Call to (ibv_(?!open_device|get_device_list|query_device|fork_init)\w+) failed(?: with error)? ?(.*)$",
                    needs=("Call to ibv_",))),
    ("shm", rx(r"Error while (?:creating|attaching to) shared memory segment|/dev/shm\S*.*(?:No space left|failed)|shm_open.*failed"
               r"|unable to allocate shared memory", needs=("shared memory", "/dev/shm", "shm_open"))),
    ("duplicate_gpu", rx(r"Duplicate GPU detected", needs=("Duplicate GPU detected",))),
    ("collective_mismatch", rx(r"[Mm]essage truncated\s*:?\s*(?:receiving|received) (\d+) bytes instead of (\d+)"
                               r"|NET/IB ?: (?:req \S+ tag \S+ peer \S+ )?collective mismatch error,? local size (\d+)"
                               r" remote(?: size)? (\d+)|Detected mismatch between collectives on ranks"
                               r"|[Mm]essage truncated\s*:?\s*$",
                               needs=("essage truncated", "collective mismatch", "mismatch between collectives"))),
    ("remote", rx(r"remote process exited or there was a network error|ncclRemoteError|Connection reset by peer"
                  r"|Connection closed by remote peer|Connection refused",
                  needs=("remote process exited", "ncclRemoteError", "Connection "))),
    # (not "Could not find a path for pattern N, falling back to simple order": graph/search.cc in NCCL 2.4-2.7 says
    # so when a search pattern does not fit the topology and goes on with the next one; nothing fails)
    ("topology", rx(r"ring \d+ does not loop back to start[^\n]*|Attribute \S+ of node \S+ not found",
                    needs=("does not loop back", "Attribute "))),
    ("cuda_failure", rx(r"Cuda failure '([^']+)'", needs=("Cuda failure '",))),
    ("code", rx(r"(ncclSystemError|ncclInternalError|ncclUnhandledCudaError|ncclInvalidUsage|ncclInvalidArgument)"
                r"|(?:(?i:NCCL error)(?: in: \S+,|:|\(\d+\),|,| \d+:)|(?:NCCL operation )?nccl[A-Z]\w+(?:\(.*?\))? failed:)"
                r" ?(?i:(unhandled system error|internal error|unhandled cuda error"
                r"|invalid usage|invalid argument))|Test NCCL failure \S+ '([^'/]+?)\s*(?:/|')",
                needs=("nccl", "NCCL error", "Nccl error", "NCCL Error", "Test NCCL failure"))),
    ("warn", rx(r"NCCL WARN (.*\b(?:[Ee]rror|ERROR|[Ff]ail(?:ed|ure)?|[Uu]nable|not found|[Ii]nvalid)\b.*)",
                needs=("NCCL WARN ",))),
)
# NCCL WARN lines the broad rule leaves alone: optional libraries and plugins that are absent on purpose, and the
# EFA plugin's and the IB transport's start-up messages, which the efa family reads (a network plugin or device
# that fails to open makes NCCL fall back to sockets: tcp_fallback, not this)
_NOT_MINE = rx(r"libibverbs|NET/Plugin|libnccl-net|libnccl-tuner|libnccl-profiler|net_fastsocket|NUMA|"
               r"Could not find real path|Failed to find ncclCollNet|NET/OFI|ibv_open_device|Unable to open device",
               needs=("libibverbs", "NET/Plugin", "libnccl-", "net_fastsocket", "NUMA", "Could not find real path",
                      "Failed to find ncclCollNet", "NET/OFI", "ibv_open_device", "Unable to open device"))
_IB_STATUS = {4: "local protection error (memory registration or GPUDirect RDMA)", 5: "work request flushed",
              10: "remote access error", 12: "transport retry counter exceeded (link or peer down)",
              13: "RNR retry counter exceeded (peer not receiving)"}
# a bare "Connection reset by peer" raised out of torch.distributed's own frames is the peers' connection
_DIST_FRAME = rx(r"File \"[^\"]*torch/distributed/|\bin init_process_group\b")
_EXC_LINE = rx(r"^\s*(?:\[rank\d+\]:\s*)?[\w.]*(?:Error|Exception): ")
_NCCL_VER = rx(r"NCCL version (\d+\.\d+\.\d+)", needs=("NCCL version",))
_HEADLINE = {
    "efa_completion": "An EFA transfer failed (aws-ofi-nccl / libfabric completion error)",
    "efa_av": "aws-ofi-nccl could not add a peer to the EFA address vector (peer unreachable or blocked)",
    "efa_endpoint": "aws-ofi-nccl could not create its EFA endpoint or domain",
    "ib_completion": "NCCL's InfiniBand/RoCE transport got a failed work completion",
    "ib_setup": "NCCL could not set up an InfiniBand/RoCE queue pair",
    "shm": "NCCL could not create its shared-memory segment (/dev/shm too small?)",
    "duplicate_gpu": "Two ranks were placed on the same GPU",
    "collective_mismatch": "The ranks disagree on a collective: one sent more data than its peer expected",
    "remote": "A peer process exited or the network dropped the connection",
    "topology": "NCCL could not build a consistent ring/topology across the ranks",
    "cuda_failure": "A CUDA call inside NCCL failed",
    "code": "NCCL returned an error",
    "warn": "NCCL warned of a failure",
}


class NcclErrorParser(Parser):
    name = "nccl_error"
    triggers = ("completed with error", "handle_error()", "handle_tx_error()", "handle_rx_error()", "cq_write_tx_error",
                "cq_write_rx_error", "address vector", "Couldn't open AV", "Creating new endpoint",
                "Couldn't open endpoint", "Couldn't create", "Couldn't bind", "Couldn't enable", "Unable to open domain",
                "Unable to create", "Got completion from peer", "Call to ibv_", "shared memory segment", "/dev/shm", "shm_open",
                "Duplicate GPU detected", "essage truncated", "collective mismatch error", "NCCL operation nccl",
                "mismatch between collectives", "remote process exited", "failed: unhandled system error",
                "failed: unhandled cuda error", "ncclRemoteError", "Connection reset by peer",
                "Connection closed by remote peer", "Connection refused", "Cuda failure", "ncclSystemError",
                "ncclInternalError", "ncclUnhandledCudaError", "ncclInvalidUsage", "ncclInvalidArgument",
                "NCCL error in:", "NCCL error: ", "NCCL error(", "Nccl error", "NCCL Error ", "unable to allocate shared memory",
                "Got completion with error", "does not loop back", "of node", "Test NCCL failure", "NCCL WARN")
    before = 3

    def __init__(self) -> None:
        super().__init__()
        self.rules: dict[str, int] = {}
        self.facts: dict[str, Any] = {}
        self.hosts: set[str] = set()
        self.ranks: set[int] = set()

    def feed(self, hit: Hit) -> None:
        t = hit.text
        for rule, pat in _RULES:
            m = search(pat, t)
            if not m:
                continue
            if rule == "cuda_failure" and ("out of memory" in t or "not supported in the installed CUDA driver" in t):
                return  # cuda_oom / version_mismatch own these
            # (gloo's transport reporting the reset is torch.distributed's own peer connection too)
            if rule == "remote" and "NCCL" not in t and "nccl" not in t and "socket" not in t.lower() and "gloo" not in t \
                    and not (search(_EXC_LINE, t) and any(search(_DIST_FRAME, b) for b in hit.before)):
                return  # a reset TCP connection elsewhere in the app is not an NCCL failure
            if rule == "warn" and search(_NOT_MINE, t):
                return
            if rule == "collective_mismatch" and "NCCL" not in t and "bytes instead of" not in t \
                    and "between collectives" not in t:
                return  # some other program's truncated message
            self.rules[rule] = self.rules.get(rule, 0) + 1
            self.ev.hit(hit, t)
            self._facts(rule, m, t)
            h = host_of(t)
            if h:
                self.hosts.add(h)
            r = rank_of(hit.label + t)
            if r is not None:
                self.ranks.add(r)
            return

    def _facts(self, rule: str, m, t: str) -> None:
        f = self.facts
        if rule == "efa_completion":
            rc = m.group(1) or m.group(3) or m.group(5)
            f.setdefault("rc", int(rc))
            msg = (m.group(2) or m.group(4) or m.group(6) or "").strip()
            if msg:
                f.setdefault("efa_error", msg[:160])
        elif rule == "efa_av":
            f.setdefault("efa_error", m.group(0)[len("NET/OFI "):][:160])
        elif rule == "efa_endpoint":
            f.setdefault("efa_error", m.group(0)[len("NET/OFI "):][:160])
        elif rule == "ib_completion":
            if m.group(1):
                f.setdefault("peer", m.group(1))
            f.setdefault("ib_status", int(m.group(2)))
            f.setdefault("vendor_err", int(m.group(3)))
        elif rule == "ib_setup":
            f.setdefault("ibv_call", m.group(1))
            if m.group(2):
                f.setdefault("ibv_error", m.group(2).strip())
        elif rule == "cuda_failure":
            f.setdefault("cuda_error", m.group(1))
        elif rule == "code":
            f.setdefault("error_code", m.group(1) or m.group(2) or m.group(3))
        elif rule in ("topology", "warn"):
            f.setdefault("nccl_warning", (m.group(1) if rule == "warn" else m.group(0)).strip()[:160])
        elif rule == "remote" and "ncclRemoteError" in t:
            f.setdefault("error_code", "ncclRemoteError")
        elif rule == "collective_mismatch" and (m.group(1) or m.group(3)):
            f.setdefault("message_bytes", int(m.group(1) or m.group(3)))
            f.setdefault("posted_bytes", int(m.group(2) or m.group(4)))
        v = search(_NCCL_VER, t)
        if v:
            f.setdefault("nccl_version", v.group(1))

    def finish(self, ctx: Context) -> list[Finding]:
        if not self.rules:
            return []
        order = [r for r, _ in _RULES]
        rule = min(self.rules, key=order.index)
        f = dict(self.facts)
        if self.hosts:
            f["hosts"] = sorted(self.hosts)
        if self.ranks:
            f["ranks"] = sorted(self.ranks)
        title = _HEADLINE[rule]
        if rule == "ib_completion":
            meaning = _IB_STATUS.get(f["ib_status"], "see the status table")
            peer = f" from peer {f['peer']}" if f.get("peer") else ""
            title += f"{peer}: status {f['ib_status']} ({meaning}), vendor err {f['vendor_err']}"
            f["ib_status_meaning"] = meaning
        elif rule == "ib_setup":
            title += f": {f['ibv_call']} failed" + (f" ({f['ibv_error']})" if f.get("ibv_error") else "")
        elif rule.startswith("efa") and f.get("efa_error"):
            title += f": {f['efa_error']}" + (f" (RC {f['rc']})" if "rc" in f else "")
        elif rule == "cuda_failure":
            title += f": {f['cuda_error']}"
        elif rule in ("topology", "warn"):
            title += f": {f['nccl_warning']}"
        elif rule == "collective_mismatch" and "message_bytes" in f:
            title += f" ({f['message_bytes']} bytes sent, {f['posted_bytes']} expected)"
        elif f.get("error_code"):
            title += f" ({f['error_code']})"
        if self.hosts and len(self.hosts) <= 3:
            title += f" on {', '.join(sorted(self.hosts))}"
        return [Finding(symptom="nccl_error", rule=f"nccl_error.{rule}", title=title, severity="critical",
                        confidence=0.6 if rule == "warn" else 0.9, evidence=self.ev.items, facts=f, first_line=self.ev.first())]


PARSERS = (NcclErrorParser,)
