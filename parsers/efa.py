"""The efa family: what the EFA data path under NCCL (aws-ofi-nccl, libfabric) reports.

efa_mr_registration: aws-ofi-nccl or libfabric's EFA provider could not register a memory region.
tcp_fallback and efa_provider_missing: which network NCCL really moves data over.

Sockets for bootstrap or the out-of-band channel are healthy. The data path over sockets is a fallback only when the
log shows EFA or InfiniBand was expected (a net plugin or IB device was looked for, the job spans nodes, or the
instance has EFA); a single-node run with no RDMA in sight legitimately uses sockets.

fork_enomem: os.fork() fails with ENOMEM when DataLoader workers start (huge pages pinned by EFA)."""
from __future__ import annotations

from typing import Any

from core import versions as V
from core.models import Finding
from parsers import gdr
from parsers.scan.base import Context, EvidenceBox, Hit, Parser, host_of, rank_of, rx, search

_OFI = rx(r"(?:(\w+):\d+ )?(?:NCCL WARN )?NET/OFI Unable to register memory \(type = (\d+)\) for device (\d+)\.?"
          r"(?: RC: (-?\d+)(?:, Error: ([^\n]+))?)?")
_REGATTR = rx(r"Couldn't register memory region with regattr\. RC: (-?\d+), ERROR: ([^\n]+)")
_LIBFABRIC = rx(r"Unable to register MR(?: of (\d+) bytes)?: ([^,\n]+)")
# fi_mr_reg / fi_mr_regattr / fi_mr_regv failing, as the plugin says it or as any program wrapping libfabric reports
# it ("LibfabricError: code -93 (...), context: fi_mr_regattr")
_FI_MR = rx(r"fi_mr_reg(?:attr|v)? failed(?:[^\n]*?(?:rail|device) (\d+))?|(?i:error)\b[^\n]*?\bfi_mr_reg(?:attr|v)?\b")
_KERNEL = rx(r"infiniband (\w+): Failed to (?:register mr \[(-?\d+)\]|process command REG_MR[^\n]*? err (-?\d+))")
# the EFA provider aborting because it cannot register (locked) memory for its own receive buffers
_RXBUF = rx(r"EFA internal error: \((\d+)\) Failure to post internal receive buffers")
_LF_ERROR = rx(r"Libfabric error: \((-?\d+)\) ([^\n]+)")
_ERRNO = {-12: "Cannot allocate memory", -14: "Bad address", -22: "Invalid argument"}
_DMABUF = rx(r"dmabuf support status: 1|hmem_cuda_use_dmabuf=1|FI_HMEM_CUDA_USE_DMABUF=1")
_MEM_TYPES = {1: "host", 2: "cuda"}


class EfaMrParser(Parser):
    name = "efa_mr_registration"
    triggers = ("Unable to register memory", "Unable to register MR", "fi_mr_reg", "dmabuf support status",
                "use_dmabuf", "Failed to register mr", "command REG_MR", "Failure to post internal receive buffers",
                "register memory region with regattr", "Selected Provider is")
    before = 3

    def __init__(self) -> None:
        super().__init__()
        self.facts: dict[str, Any] = {}
        self.count = 0
        self.dmabuf = False
        self.hosts: set[str] = set()
        self.ranks: set[int] = set()
        self.provider = ""

    def feed(self, hit: Hit) -> None:
        t = hit.text
        if search(_DMABUF, t):
            self.dmabuf = True
            return
        if "Selected Provider is" in t:
            self.provider = t.split("Selected Provider is", 1)[1].split()[0].strip(",;") if not self.provider else self.provider
            return
        f = self.facts
        m = search(_OFI, t)
        if m:
            if m.group(1):
                f.setdefault("function", m.group(1))
            f.setdefault("mem_type", _MEM_TYPES.get(int(m.group(2)), m.group(2)))
            f.setdefault("device", int(m.group(3)))
            if m.group(4):
                f.setdefault("rc", int(m.group(4)))
            if m.group(5):
                f.setdefault("error", m.group(5).strip())
        elif search(_REGATTR, t):
            r = search(_REGATTR, t)
            f.setdefault("function", "fi_mr_regattr")
            f.setdefault("rc", int(r.group(1)))
            f.setdefault("error", r.group(2).strip())
        elif search(_RXBUF, t):
            f.setdefault("function", "EFA provider receive buffers")
            for line in hit.before:
                e = search(_LF_ERROR, line)
                if e:
                    f.setdefault("rc", int(e.group(1)))
                    f.setdefault("error", e.group(2).strip())
        elif search(_KERNEL, t):
            k = search(_KERNEL, t)
            rc = int(k.group(2) or k.group(3))
            f.setdefault("function", f"{k.group(1)} kernel driver (REG_MR)")
            f.setdefault("rc", rc)
            if rc in _ERRNO:
                f.setdefault("error", _ERRNO[rc])
        else:
            m = search(_LIBFABRIC, t)
            fi = None if m else search(_FI_MR, t)
            if not m and not fi:
                return
            if m:
                f.setdefault("error", m.group(2).strip())
                if m.group(1):
                    f.setdefault("bytes", int(m.group(1)))
                f.setdefault("function", "efa_mr_reg")
            else:
                f.setdefault("function", "fi_mr_reg")
        self.count += 1
        self.ev.hit(hit, t)
        h = host_of(t)
        if h:
            self.hosts.add(h)
        r = rank_of(hit.label + t)
        if r is not None:
            self.ranks.add(r)

    def finish(self, ctx: Context) -> list[Finding]:
        if not self.count:
            return []
        f = dict(self.facts)
        f["count"] = self.count
        if self.dmabuf:
            f["dmabuf"] = True
        if self.hosts:
            f["hosts"] = sorted(self.hosts)
        err = f.get("error", "")
        if f.get("rc") == -22 or "Invalid argument" in err:   # the efa-installer < 1.29.1 pairing needs NCCL 2.19+
            f["cause" if V.compare(ctx.versions.get("nccl") or "99", "ge", "2.19") else "ruled_out"] = "cuda_sync_memops"
        elif f.get("rc") in (12, -12) or "Cannot allocate memory" in err:
            f["cause"] = "enomem"
        elif "Bad address" in err and self.dmabuf:
            f["cause"] = "dmabuf"
        what = f"{f['mem_type'].upper() if f.get('mem_type') == 'cuda' else f.get('mem_type', 'a')} memory"
        who = "EFA" if self.provider in ("", "efa") else f"libfabric's {self.provider} provider"
        title = f"{who} could not register {what} for RDMA"
        if "device" in f:
            title += f" on device {f['device']}"
        detail = ", ".join(x for x in (f"RC {f['rc']}" if "rc" in f else "", err) if x)
        if detail:
            title += f" ({detail})"
        if f.get("function"):
            title += f" in {f['function']}"
        return [Finding(symptom="efa_mr_registration", rule=f"efa_mr_registration.{f.get('cause', 'other')}",
                        title=title, severity="critical", confidence=0.95, evidence=self.ev.items, facts=f,
                        first_line=self.ev.first())]


_SOCKET = rx(r"NET/Socket ?: Using \[\d+\](\w[\w.-]*)|Using network Socket|Using internal Network Socket"
             r"|via NET/Socket", needs=("Socket",))
_RDMA = rx(r"Using network (?:AWS Libfabric|Libfabric|IB|IBext|\w*OFI)|Using internal Network IB|Selected Provider is efa"
           r"|via NET/(?:IB|AWS Libfabric|Libfabric|OFI)|NET/IB ?: Using \[\d+\]\w|NET/OFI Selected provider is efa",
           needs=("Using network", "Using internal Network", "Selected Provider is efa", "via NET/", "NET/IB",
                  "Selected provider is efa"))
_EXPECT = (
    ("ofi_init_failed", rx(r"aws-ofi-nccl initialization failed|NET/OFI .*(?:failed|Failed)", needs=("ailed",))),
    ("ib_no_device", rx(r"NET/IB ?: No device found", needs=("NET/IB",))),
    ("ib_open_failed", rx(r"ibv_open_device failed|NET/IB ?: Unable to open device", needs=("ibv_open_device", "NET/IB"))),
    ("ib_plugin", rx(r"P2P plugin IBext|Loaded net plugin|Plugin Path|NCCL_IB_DISABLE set by environment to 0",
                     needs=("plugin", "Plugin", "NCCL_IB_DISABLE"))),
    ("ib_disabled", rx(r"NCCL_IB_DISABLE set by environment to 1", needs=("NCCL_IB_DISABLE",))),   # only with IPoIB
    ("efa_platform", rx(r"Running on [Pp]\d\w* platform|FI_PROVIDER|provider_filter|NET/OFI",
                        needs=("platform", "FI_PROVIDER", "provider_filter", "NET/OFI"))),
)
_PROVIDER = rx(r"Couldn't find any optimal provider|Only EFA provider is supported|EFA libfabric provider not detected|fi_getinfo(?: failed)?:? ?-61|fi_getinfo\(\) call failed: No data available|Could not find a valid provider"
               r"|fi_getinfo: provider efa output empty list|No eligible providers were found"
               r"|No providers? (?:found|available)|OFI NCCL failure|Unable to find (?:a |any )?provider"
               r"|Unable to find a protocol that worked|Failed to initiali[sz]e (?:rdma|sendrecv) protocol",
               needs=("rovider", "fi_getinfo", "OFI NCCL failure", "protocol"))   # (the installer's check too)
# aws-ofi-nccl running over libfabric's TCP (or UDP/sockets) provider: the plugin is loaded, but the wire is TCP
_OFI_TCP = rx(r"(?i)NET/OFI Selected provider is (tcp|sockets|udp)\b", needs=("provider is",), fold=True)
# NCCL found no network plugin (every generation: "No plugin found (libnccl-net.so)" up to 2.21 — with or without
# dlerror — and "Could not find: libnccl-net.so" since 2.22); the cause of a fallback only once one is established
_NO_PLUGIN = rx(r"NET/Plugin ?: (?:dlerror=.*?)?No plugin found \((libnccl-net[^)]*)\)"
                r"|NET/Plugin: Could not find: (?:\S+ )*?(libnccl-net[\w.-]*?)\.? Using internal")
_NNODES = rx(r"\bnNodes (\d+)\b", needs=("nNodes",))
# a line labelled with its node's address by a multi-node launcher (DeepSpeed's pdsh runner: "10.0.3.7: host:pid:tid
# [3] NCCL INFO …"); DeepSpeed launches one node without pdsh
_NODE_LABEL = rx(r"^(\d{1,3}(?:\.\d{1,3}){3}): [A-Za-z0-9][\w.-]*:\d+:\d+ \[\d+\]")
_FABRIC = {"efa": "EFA", "infiniband": "InfiniBand"}
_EFA_FAMILIES = ("p4d", "p4de", "p5", "p5e", "p5en", "p6-b200", "p6-b300", "p6e-gb200")


class TransportParser(Parser):
    name = "transport"
    triggers = ("NET/Socket", "Using network", "Using internal Network", "Selected Provider", "Selected provider",
                "via NET/Socket", "NET/IB", "NET/OFI", "ibv_open_device", "P2P plugin", "Loaded net plugin", "Plugin Path",
                "NCCL_IB_DISABLE", "platform", "FI_PROVIDER", "provider_filter", "optimal provider", "fi_getinfo",
                "valid provider", "output empty list", "No provider", "OFI NCCL failure", "find a provider", "find any provider",
                "eligible providers", "protocol that worked", "e rdma protocol", "e sendrecv protocol", "nNodes",
                "No plugin found", "Could not find: ", "provider not detected")

    def __init__(self) -> None:
        self.sock_ev = EvidenceBox()
        self.prov_ev = EvidenceBox()
        self.expect_ev = EvidenceBox(2)
        self.socket_hosts: set[str] = set()
        self.rdma_hosts: set[str] = set()
        self.socket_lines = 0
        # lines that say sockets carry the data; "NET/Socket : Using [0]ib0" alone is the socket transport's start-up
        # line, which NCCL up to 2.5 prints on every host beside "NET/IB : Using …" (bootstrap rides it)
        self.socket_data = 0
        self.rdma_lines = 0
        self.ifaces: set[str] = set()
        self.expect: set[str] = set()
        self.ofi_tcp = 0   # lines where aws-ofi-nccl picked a TCP-type libfabric provider
        self.net_channels = 0   # "via NET/Socket" channel lines: NCCL only uses a NET transport between nodes
        self.nodes: int | None = None
        self.labelled_nodes: set[str] = set()   # node addresses a multi-node launcher put in front of lines
        self.no_plugin: tuple[int, str, str] | None = None   # (line, text, library) of "no network plugin"
        self.efa = False   # aws-ofi-nccl picked libfabric's efa provider
        self.gdr = gdr.GdrWatch()   # the plugin's channel lines, chunk-wide: GPUDirect RDMA or not

    # The plugin's channel lines are rows (counted, never read line by line); every other line as before.
    families = (gdr.CHANNELS,)

    def feed_rows(self, rows) -> None:
        self.gdr.feed_rows(rows)

    def wants_rows(self, family) -> bool:
        return not self.gdr.gdr   # (one channel with GPUDirect RDMA settles it)

    def feed(self, hit: Hit) -> None:
        t = hit.text
        if self.no_plugin is None and "lugin" in t:
            p = search(_NO_PLUGIN, t)
            if p:
                self.no_plugin = (hit.no, t, p.group(1) or p.group(2))
                return
        h = host_of(t)
        if t[:1].isdigit() and (lab := search(_NODE_LABEL, t)):
            self.labelled_nodes.add(lab.group(1))
        n = search(_NNODES, t)
        if n:
            self.nodes = max(self.nodes or 0, int(n.group(1)))
        if "via NET/Socket" in t:
            self.net_channels += 1
        o = search(_OFI_TCP, t)
        if o:
            self.ofi_tcp += 1
            self.ifaces.add(f"libfabric {o.group(1).lower()} provider")
            m = o
        else:
            m = search(_SOCKET, t)
        if m:
            self.socket_lines += 1
            if o or not m.group(1):
                self.socket_data += 1   # "Using network Socket", a channel via NET/Socket: not the interface line
            self.sock_ev.hit(hit, t)
            if m.group(1) and not o:
                self.ifaces.add(m.group(1))
            if h:
                self.socket_hosts.add(h)
            return
        if search(_RDMA, t):
            if self.ofi_tcp and "ibfabric" in t:
                return   # the plugin's channels ride the TCP provider picked above

            self.rdma_lines += 1
            self.efa = self.efa or "rovider is efa" in t
            if h:
                self.rdma_hosts.add(h)
            return
        if search(_PROVIDER, t):
            self.prov_ev.hit(hit, t)
            self.expect.add("efa_provider")
            return
        for name, pat in _EXPECT:
            if search(pat, t):
                self.expect.add(name)
                if name != "efa_platform":
                    self.expect_ev.hit(hit, t)
                return

    def seen(self) -> bool:
        return self.prov_ev.total > 0 or self.sock_ev.total > 0

    def finish(self, ctx: Context) -> list[Finding]:
        out: list[Finding] = []
        if self.prov_ev.total:
            out.append(Finding(
                symptom="efa_provider_missing", rule="efa_provider_missing.ofi", severity="critical", confidence=0.9,
                title="libfabric offers no usable EFA provider on this node, so aws-ofi-nccl cannot use EFA",
                evidence=self.prov_ev.items, facts={"count": self.prov_ev.total}, first_line=self.prov_ev.first()))
        fallback = self._fallback(ctx)
        if fallback:
            if out:
                fallback.caused_by = "efa_provider_missing"
            out.append(fallback)
        no_gdr = None if out or self.ofi_tcp else self.gdr.finding(ctx, self.efa)
        return out + [no_gdr] if no_gdr else out

    def _one_host(self, ctx: Context) -> bool:
        """Every line names one host and its sockets listen on the loopback: no other node could have joined."""
        hosts = ctx.hosts | self.socket_hosts | self.rdma_hosts
        return len(hosts) == 1 and any(i == "lo" for i in self.ifaces)

    def _fallback(self, ctx: Context) -> Finding | None:
        if not self.socket_lines:
            return None
        only_socket = self.socket_hosts - self.rdma_hosts
        if self.rdma_lines and (not only_socket or not self.socket_data):
            return None  # RDMA is the data path; socket lines belong to other hosts we cannot tell apart, or are start-up
        if ctx.world_size == 1:
            return None   # one rank: no data crosses the network at all
        reasons = set(self.expect)
        family = str(ctx.job.get("instance_family", ""))
        if family in _EFA_FAMILIES:
            reasons.add("efa_instance")
        if (len(ctx.hosts | self.socket_hosts) > 1 or self.net_channels or (self.nodes or 0) > 1 or self.labelled_nodes
                or (ctx.world_size or 0) > 8):
            reasons.add("multi_node")
        if (self.nodes == 1 or self._one_host(ctx)) and not reasons & {"multi_node", "efa_instance"}:
            return None   # every rank on one host: NCCL moves data over P2P/SHM there, the socket is bootstrap only
        if "ib_disabled" in reasons and not any(i.startswith("ib") for i in self.ifaces):
            # IB switched off on purpose with sockets on Ethernet: an IB plugin in the image is no sign it was wanted
            reasons -= {"ib_disabled", "ib_plugin"}
        if not reasons - {"ib_no_device"}:
            return None   # NCCL probes IB on every host and says "No device found" where there is none: not a fallback
        if self.ofi_tcp == self.socket_lines and not reasons & {"multi_node", "efa_instance"}:
            return None   # the plugin picked TCP on one node without EFA: nothing crosses the network anyway
        f: dict[str, Any] = {"expected_because": sorted(reasons)}
        aws = bool(reasons & {"efa_instance", "efa_platform", "efa_provider", "ofi_init_failed"}) or self.ofi_tcp
        if self.no_plugin and not aws and "ib_disabled" not in reasons:
            aws = "multi_node" in reasons and not reasons & {"ib_no_device", "ib_open_failed", "ib_plugin"}
        if self.no_plugin and aws:
            f["net_plugin_missing"] = self.no_plugin[2]
        ib = reasons & {"ib_no_device", "ib_open_failed", "ib_plugin", "ib_disabled"} or any(i[:2] == "ib" for i in self.ifaces)
        if aws or ib:   # the fabric the job expected (EFA: AWS signs; InfiniBand: IB probed, an IB plugin, IPoIB)
            f["fabric"] = "efa" if aws else "infiniband"
        if self.ifaces:
            f["socket_interfaces"] = sorted(self.ifaces)
            if off := [i for i in f["socket_interfaces"] if not i.startswith("en")]:   # (every AWS ENI is en*)
                f["bootstrap_off_en"] = off
        f.update({k: sorted(v) for k, v in (("socket_hosts", only_socket), ("rdma_hosts", self.rdma_hosts)) if v})
        cause = ("aws-ofi-nccl runs on libfabric's TCP provider because no EFA provider was usable"
                 if self.ofi_tcp else f"NCCL could not load the network plugin ({f['net_plugin_missing']}), so it used "
                 "its internal socket transport" if "net_plugin_missing" in f else "InfiniBand was switched off (NCCL_IB_DISABLE=1), so data goes over IPoIB sockets"
                 if "ib_disabled" in reasons else "aws-ofi-nccl failed to initialise" if "ofi_init_failed" in reasons
                 else "no InfiniBand device was usable" if reasons & {"ib_no_device", "ib_open_failed"}
                 else "no EFA provider" if "efa_provider" in reasons else "no RDMA transport was picked up")
        where = f" ({', '.join(sorted(self.ifaces))})" if self.ifaces else ""
        title = f"NCCL moves data over TCP sockets{where} instead of {_FABRIC.get(f.get('fabric'), 'EFA/InfiniBand')}: {cause}"
        if self.rdma_hosts and only_socket:
            title += f"; {len(only_socket)} host(s) fell back while others use RDMA"
        ev = sorted(self.expect_ev.items + self.sock_ev.items, key=lambda e: e.line)[:5]
        if "net_plugin_missing" in f:   # the dlerror line is the evidence of the cause
            box = EvidenceBox()
            box.add(self.no_plugin[0], self.no_plugin[1])
            ev = sorted(box.items + ev[:4], key=lambda e: e.line)
        return Finding(symptom="tcp_fallback", rule="tcp_fallback.socket_data_path", title=title, severity="error",
                       confidence=0.9 if reasons - {"efa_platform"} else 0.7, evidence=ev, facts=f,
                       first_line=min((e.line for e in ev), default=0))


_ENOMEM = rx(r"(?:OSError|BlockingIOError|RuntimeError)?:? ?\[Errno 12\] Cannot allocate memory")
_FORK = rx(r"os\.fork\(\)|\bfork\(\)|_launch|popen_fork|DataLoader worker|multiprocessing|_MultiProcessingDataLoaderIter")


class ForkParser(Parser):
    name = "fork_enomem"
    # libfabric's EFA provider aborts a process that forks while its memory is registered without fork support
    triggers = ("[Errno 12]", "os.fork()", "popen_fork", "the libfabric EFA provider is operating")
    before = 6
    after = 2

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.fork_seen = False
        self.aborts, self.abort_count = EvidenceBox(), 0

    def feed(self, hit: Hit) -> None:
        if "libfabric EFA provider is operating" in hit.text:
            self.abort_count += 1
            fork = next((i for i, b in enumerate(reversed(hit.before)) if "fork()" in b), None)
            if fork is not None:   # the notice's line that names fork(), a line or two above
                self.aborts.add(hit.no - 1 - fork, hit.before[-1 - fork])
            self.aborts.hit(hit)
        elif search(_ENOMEM, hit.text):
            self.count += 1
            self.ev.hit(hit)
            if any(search(_FORK, x) for x in (*hit.before, *hit.after)):
                self.fork_seen = True
        elif search(_FORK, hit.text):
            self.fork_seen = True

    def finish(self, ctx: Context) -> list[Finding]:
        if self.abort_count and not self.count:
            return [Finding(symptom="fork_enomem", rule="fork_enomem.efa_fork_abort", severity="critical",
                            confidence=0.9, title="libfabric's EFA provider aborted the job: a process called fork() "
                            "(data-loader workers, a subprocess) while EFA memory was registered",
                            evidence=self.aborts.items, facts={"count": self.abort_count},
                            first_line=self.aborts.first())]
        if not self.count:
            return []
        title = (f"os.fork() failed with ENOMEM ({self.count}x): worker processes (DataLoader) could not start"
                 if self.fork_seen else f"A process failed with ENOMEM ({self.count}x); likely fork() in worker start-up")
        return [Finding(symptom="fork_enomem", rule="fork_enomem.fork" if self.fork_seen else "fork_enomem.enomem",
                        title=title, severity="critical", confidence=0.9 if self.fork_seen else 0.6,
                        evidence=self.ev.items, facts={"count": self.count, "fork_seen": self.fork_seen},
                        first_line=self.ev.first())]


PARSERS = (EfaMrParser, TransportParser, ForkParser)
