"""Context the findings and playbooks need: versions, the job's settings (Megatron/DeepSpeed args), hosts, world size.

This collector finds no symptom. `versions_seen` keeps every distinct version per component so the
version_mismatch parser can tell when ranks disagree."""
from __future__ import annotations

import math
import re
from typing import Any

from core import job as J
from parsers.scan.base import Collector, Context, Hit, findall, host_of, rx, search
from parsers.scan.scanner import hit_of
from parsers.scan.rows import Family

# (component, literals one of which must be on the line, pattern)
_VERSION_RULES: tuple[tuple[str, tuple[str, ...], Any], ...] = (
    ("nccl", ("NCCL version",), rx(r"NCCL version:?\s*v?(\d+\.\d+\.\d+)(?:\+cuda(\d+\.\d+))?")),
    ("aws_ofi_nccl", ("aws-ofi-nccl",), rx(r"aws-ofi-nccl(?: version)?[ :v]+(\d+\.\d+\.\d+)")),
    ("libfabric", ("ibfabric", "fi_info"), rx(r"(?:Libfabric version|libfabric:?|fi_info:?)\s+v?(\d+\.\d+(?:\.\d+)?)")),
    ("driver", ("Driver Version",), rx(r"Driver Version\s*:\s*(\d+\.\d+(?:\.\d+)?)")),
    ("driver_cuda", ("river",), rx(r"(?:cudaDriverVersion|Using CUDA driver version)\s+(\d{4,5})\b")),
    ("cuda", ("CUDA Version", "CUDA runtime", "compilation tools"),
     rx(r"(?:CUDA Version\s*:|CUDA runtime version:?|Cuda compilation tools, release)\s*(\d+\.\d+)")),
    ("torch", ("torch", "PyTorch"), rx(r"(?:\btorch|PyTorch)(?: version)?\s*(?:\.{2,}|[:=]+|is)?\s*v?(\d+\.\d+\.\d+)(?:\+cu(\d+))?")),
    # dmesg's "Linux version", `uname -a`, and the "Platform: Linux-5.15.0-…" line of environment reports
    ("kernel", ("Linux",), rx(r"Linux version (\d+\.\d+\.\d+)|Platform:?\s*Linux-(\d+\.\d+\.\d+)"
                             r"|^Linux \S+ (\d+\.\d+\.\d+)-\S* #\d")),
    ("efa_installer", ("EFA installer", "efa-installer"),
     rx(r"EFA installer version:?\s*(\d+\.\d+\.\d+)|aws-efa-installer-(\d+\.\d+\.\d+)")),
)

_ARG_DUMP = rx(r"^\s*(?:\[[^\]]*\]:?\s*)*(?:\S+\]\s+)?(\w+)\s(?:\.{2,}\s|\s+)(\S+)\s*$")
_JSON_KV = rx(r'"(train_micro_batch_size_per_gpu|gradient_clipping|initial_scale_power|reduce_bucket_size'
              r'|gradient_accumulation_steps)"\s*:\s*([\d.eE+-]+)')
# the HF Trainer's TrainingArguments(...) dump: one "key=value," per line
_KV = rx(r"^\s*(per_device_train_batch_size|gradient_accumulation_steps|max_grad_norm|learning_rate"
         r"|gradient_checkpointing|bf16|fp16)=([^,\s]+),?\s*$")
_FLAG = rx(r"(?<!\S)--([a-z][a-z0-9_-]+)(?:[ =]([^\s-][^\s]*|-?\d[^\s]*))?")
_PARAMS = rx(r"number of parameters on \(tensor, pipeline\) model parallel rank \((\d+), (\d+)\):\s*(\d+)"
             r"|(?:Number of trainable parameters|Total params|total parameters)\s*[=:]\s*([\d,]+)")
_ENV = rx(r"\b((?:NCCL|FI|RDMAV|TORCH_NCCL|PYTORCH_CUDA)_[A-Z0-9_]+)(?:=| set by environment to )([^\s,;'\"]+)")
_HINT = re.compile(r"(?i)(?:try|consider|recommend\w*|please)\s+(?:setting|to set|set|using|use)\s+$")
RANK_HOSTS = 4096   # ranks whose host is remembered (the first line of each names it)
_COMM_RANK = rx(r"\bcomm 0x[0-9a-fA-F]+ rank (\d+) nranks (\d+)")
_NRANKS = rx(r"\bnranks (\d+)\b|\bworld[_ ]size[=: ]+(\d+)|\bWORLD_SIZE=(\d+)")
_INSTANCE = rx(r"\b(p4de?|p5en|p5e|p5|p6-b200|p6-b300|p6e-gb200|g5|g6e?)\.\d*x?large\b|Running on (\w+)[\w.-]* platform")

class ContextCollector(Collector):
    name = "context"
    triggers = (
        "NCCL version", "aws-ofi-nccl", "Libfabric version", "libfabric:", "fi_info", "Driver Version",
        "cudaDriverVersion", "CUDA driver version", "CUDA Version", "CUDA runtime version", "compilation tools",
        "torch", "PyTorch", "EFA installer", "efa-installer", " ....", "train_micro_batch_size_per_gpu", "zero_optimization_stage", " --", '"train_micro_batch_size_per_gpu"',
        '"gradient_clipping"', '"initial_scale_power"', "number of parameters", "trainable parameters",
        "Total params", "total parameters", "nranks", "NCCL_", "FI_", "RDMAV_", "PYTORCH_CUDA_", "world_size", "world size", "WORLD_SIZE", "xlarge", "platform",
        # the HF TrainingArguments dump, whole keys: a trigger may contain another, never half-overlap one
        "Linux", "per_device_train_batch_size=", "gradient_accumulation_steps=", "max_grad_norm=", "learning_rate=",
        "gradient_checkpointing=", "bf16=", "fp16=",
    )

    # NCCL INFO logs are mostly communicator set-up: their "comm 0x… rank N nranks M" lines are a family's rows
    # (the rank, the world size and the host, read natively); a line of it without them is read as a line.
    families = (Family("nccl_comm", ("comm 0x",), (
        ("rank", r"\bcomm 0x[0-9a-fA-F]+ rank (\d+) nranks \d+"), ("world", r"\bcomm 0x[0-9a-fA-F]+ rank \d+ nranks (\d+)"),
        ("host", r"([A-Za-z0-9][\w.-]*):\d+:\d+ \[\d+\] NCCL")), need=("rank",)),)

    def feed_rows(self, rows) -> None:
        ranks, worlds, hosts = rows.get("rank"), rows.get("world"), rows.get("host")
        if None in ranks:
            for no, r, text in zip(rows.no, ranks, rows.text):
                if r is None and any(t in text for t in self.triggers):   # (as the line would have been fed)
                    self.feed(hit_of(no, text))
        known = self.rank_hosts.keys()
        for r, w, h in dict.fromkeys(zip(ranks, worlds, hosts)):
            if r is None:
                continue
            if int(w) > (self.world or 0):
                self.world = int(w)
            if int(r) not in known and len(self.rank_hosts) < RANK_HOSTS and h:
                self.hosts.add(h)
                self.rank_hosts[int(r)] = h

    def _comm(self, rank: int, world: int, line) -> None:
        """One communicator line: the world size, and the host of a rank not seen before (`line()` gives its text,
        decoded only then)."""
        if world > (self.world or 0):
            self.world = world
        if rank not in self.rank_hosts and len(self.rank_hosts) < RANK_HOSTS:
            h = host_of(line())
            if h:
                self.hosts.add(h)
                self.rank_hosts[rank] = h

    def __init__(self) -> None:
        self.versions: dict[str, str] = {}
        self.seen: dict[str, dict[str, tuple[int, str]]] = {}
        self.job: dict[str, Any] = {}
        self.hosts: set[str] = set()
        self.world: int | None = None
        self.params_rank: dict[tuple[int, int], int] = {}
        self.rank_hosts: dict[int, str] = {}

    def feed(self, hit: Hit) -> None:
        t = hit.text
        if "comm 0x" in t and " nranks " in t:  # the most frequent line in NCCL INFO logs: rank, size, host only
            m = search(_COMM_RANK, t)
            if m:
                self._comm(int(m.group(1)), int(m.group(2)), lambda: t)
                return
        if "NCCL" in t or "OFI" in t:
            h = host_of(t)
            if h:
                self.hosts.add(h)
        for key, guards, pat in _VERSION_RULES:
            if not any(g in t for g in guards):
                continue
            m = search(pat, t)
            if not m:
                continue
            val = next(g for g in m.groups() if g is not None)
            if key == "driver_cuda":
                n = int(val)
                val = f"{n // 1000}.{(n % 1000) // 10}"
            self.versions.setdefault(key, val)
            self.seen.setdefault(key, {}).setdefault(val, (hit.no, t.strip()[:300]))
            if key == "nccl" and m.group(2):
                self.versions.setdefault("cuda", m.group(2))
            if key == "torch" and m.group(2):
                cu = m.group(2)
                self.versions.setdefault("cuda", f"{cu[:-1]}.{cu[-1]}")
        if " ...." in t or "_per_gpu " in t or "_stage " in t:
            m = search(_ARG_DUMP, t)
            if m and m.group(1) in J.SETTINGS:
                self._set(m.group(1), m.group(2))
        if "=" in t and "--" not in t:
            m = search(_KV, t)
            if m:
                self._set(m.group(1), m.group(2))
        if '"' in t:
            for m in findall(_JSON_KV, t):
                if m.group(1) in J.SETTINGS:
                    self._set(m.group(1), m.group(2))
        if "--" in t and "---" not in t:
            for m in findall(_FLAG, t):
                key = J.FLAG_TO_KEY.get(m.group(1))
                if key:
                    kind = J.SETTINGS[key]
                    self._set(key, m.group(2) if kind is not bool else "true")
        if "_" in t and "environment variable to" not in t:  # the plugin's own settings are not the user's
            for m in findall(_ENV, t):
                if _HINT.search(t, 0, m.start()):
                    continue   # advice inside a message ("try setting PYTORCH_CUDA_ALLOC_CONF=..."), not the job's env
                env = self.job.setdefault(J.ENV, {})
                if len(env) < 64:
                    env.setdefault(m.group(1), m.group(2).rstrip(".)"))
        m = search(_PARAMS, t) if "arameters" in t or "params" in t else None
        if m:
            if m.group(3):
                self.params_rank[(int(m.group(1)), int(m.group(2)))] = int(m.group(3))
            else:
                self.job.setdefault("parameters", int(m.group(4).replace(",", "")))
        m = search(_NRANKS, t) if "ranks" in t or "orld" in t or "WORLD" in t else None
        if m:
            n = int(next(g for g in m.groups() if g))
            self.world = max(self.world or 0, n)
        m = search(_INSTANCE, t) if "xlarge" in t or "platform" in t else None
        if m:
            self.job.setdefault("instance_family", (m.group(1) or m.group(2)).lower())

    def _set(self, key: str, raw: str | None) -> None:
        if raw is None:
            return
        val = J.coerce(J.SETTINGS[key], raw)
        if key == "recompute_granularity" and val is None:   # Megatron's "None": no activation recompute at all
            self.job.setdefault("recompute_activations", False)
            return
        if val is None and J.SETTINGS[key] is not str:
            return
        if key == "initial_dynamic_scale":   # DeepSpeed prints the scale; its JSON sets the power of two
            if val < 1 or not math.log2(val).is_integer():
                return
            key, val = "initial_scale_power", int(math.log2(val))
        self.job.setdefault(J.ALIASES.get(key, key), val)

    def collect(self, ctx: Context) -> None:
        ctx.versions.update(self.versions)
        ctx.versions_seen = self.seen
        if self.params_rank and "parameters" not in self.job:
            tp = max(t for t, _ in self.params_rank) + 1
            pp = max(p for _, p in self.params_rank) + 1
            per = sum(self.params_rank.values()) / len(self.params_rank)
            self.job["parameters"] = int(per * tp * pp)
        ctx.job.update(self.job)
        ctx.hosts |= self.hosts
        ctx.rank_hosts.update(self.rank_hosts)
        if self.world:
            ctx.world_size = self.world


COLLECTOR = ContextCollector
