"""cuda_oom: every PyTorch OOM message generation, NCCL's `Cuda failure 'out of memory'`, cuBLAS alloc failures."""
from __future__ import annotations

from typing import Any

from core.models import Finding
from parsers.scan.base import Context, Hit, Parser, findall, rank_of, ranks_text, rx, search, to_gib

_SIZE = r"([\d.]+)\s*([KMGT]i?B|bytes)"
_KINDS = (
    ("allocator", rx(r"OutOfMemoryError|(?:CUDA|HIP) out of memory\.|Error: (?:CUDA|HIP) out of memory"
                     r"|^\W*Tried to allocate [\d.]+ ?[KMGT]i?B \(GPU \d+; [\d.]+ ?[KMGT]i?B total capacity")),
    ("nccl", rx(r"Cuda failure '?out of memory")),
    ("runtime", rx(r"CUDA error: ?out of memory|Out of memory error on GPU \d+\.|cuda runtime error \(2\) : out of memory|THCudaCheck FAIL.*out of memory"
                   r"|CUDA_ERROR_OUT_OF_MEMORY|cudaErrorMemoryAllocation|hipErrorOutOfMemory|HIP error: ?out of memory")),
    ("cublas", rx(r"CUBLAS_STATUS_ALLOC_FAILED")),
    # XLA (JAX, torch_xla, TensorFlow) on GPU or TPU: the compiler's or the allocator's RESOURCE_EXHAUSTED
    ("xla", rx(r"Ran out of memory in memory space (?:hbm|vmem)|RESOURCE_EXHAUSTED: (?:Out of memory|Failed to allocate)"
               r"|OOM when allocating tensor", needs=("memory space", "RESOURCE_EXHAUSTED", "OOM when"))),
    # cuBLAS failing to create its handle: its workspace allocation on a full GPU (a bad install is the other cause)
    ("cublas_handle", rx(r"CUBLAS_STATUS_NOT_INITIALIZED when calling `?cublasCreate|Create cublas handle failed")),
)
_TRIED = rx(r"Tried to allocate " + _SIZE)
_XLA_USED = rx(r"Used ([\d.]+)G of ([\d.]+)G (?:hbm|vmem)", needs=("Used ",))
_OLD = rx(r"\(GPU (\d+); " + _SIZE + r" total capacity; " + _SIZE + r" already allocated; " + _SIZE + r" free;"
          r"(?: " + _SIZE + r" (?:reserved in total by PyTorch|cached))?")
_NEW_TOTAL = rx(r"GPU (\d+) has a total capacity of " + _SIZE + r" of which " + _SIZE + r" is free")
_SELF_INUSE = rx(r"this process has " + _SIZE + r" memory in use")
_NEW_ALLOC = rx(r"Of the allocated memory " + _SIZE + r" is allocated by PyTorch,(?: with " + _SIZE +
                r" allocated in private pools \([^)]*\),)? and " + _SIZE + r" is reserved by PyTorch but unallocated")
_PHASES = (
    ("nccl_init", rx(r"init\.cu|init\.cc|ncclCommInit|init_process_group|new_group")),
    ("backward", rx(r"\.backward\(|autograd/__init__\.py.*backward|in backward\b|_engine_run_backward")),
    ("optimizer_step", rx(r"optimizer\.step|optim/\w+\.py|\bin step\b|_single_tensor_adam|_multi_tensor_adam")),
    ("nccl_collective", rx(r"enqueue\.cc|all_reduce|allreduce|all_gather|reduce_scatter")),
    ("forward", rx(r"\bforward\b|_call_impl|model\(")),
)


_PROCESS = rx(r"Process (\d+) has " + _SIZE + r" memory in use")


def _processes(text: str, f: dict[str, Any]) -> dict[str, Any]:
    """What this process and the others on the GPU hold, when the message says (PyTorch 2.1+, through NVML). It
    names this process "this process" and lists the others by PID; in a container, where NVML's PIDs are not the
    process's own, every process is listed by PID and ours is the one whose use best covers what PyTorch holds.
    Other processes are named only when they hold a share that matters — a leftover job or two ranks on one GPU."""
    procs = [(int(m.group(1)), to_gib(m.group(2), "b" if m.group(3) == "bytes" else m.group(3)))
             for m in findall(_PROCESS, text)]
    m = search(_SELF_INUSE, text)
    if m:
        out, others = {"process_in_use_gib": _gib(m, 1)}, procs
    elif procs:
        held = (f.get("allocated_gib") or 0) + (f.get("reserved_unallocated_gib") or 0)
        ours = min(procs, key=lambda p: (p[1] < held, abs(p[1] - held)))
        out, others = {"process_in_use_gib": ours[1]}, [p for p in procs if p is not ours]
    else:
        return {}
    gib = round(sum(g for _, g in others), 2)
    if others and gib >= max(2.0, 0.1 * (f.get("total_gib") or 80)):
        out.update(other_processes_gib=gib, other_pids=[pid for pid, _ in others])
    return out


def _gib(m, i: int) -> float | None:
    if m.group(i) is None:
        return None
    unit = m.group(i + 1)
    return to_gib(m.group(i), "b" if unit == "bytes" else unit)


class OomParser(Parser):
    name = "cuda_oom"
    triggers = ("out of memory", "Out of memory error on GPU", "Tried to allocate", "OutOfMemoryError", "CUBLAS_STATUS_ALLOC_FAILED", "CUDA_ERROR_OUT_OF_MEMORY",
                "cudaErrorMemoryAllocation", "cublasCreate", "Create cublas handle", "RESOURCE_EXHAUSTED",
                "OOM when allocating")
    before = 12
    after = 12

    def __init__(self) -> None:
        super().__init__()
        self.kinds: dict[str, int] = {}
        self.ranks: set[int] = set()
        self.facts: dict[str, Any] = {}
        self.phase: str | None = None

    def feed(self, hit: Hit) -> None:
        text = hit.joined(1) if "Tried to allocate" in hit.text and "free" not in hit.text else hit.text
        kind = next((k for k, pat in _KINDS if search(pat, text)), None)
        if kind is None:
            return
        self.kinds[kind] = self.kinds.get(kind, 0) + 1
        self.ev.hit(hit)
        r = rank_of(hit.label + hit.text)
        if r is not None:
            self.ranks.add(r)
        if "tried_gib" not in self.facts:
            self._numbers(text)
        if self.phase is None:
            self.phase = self._phase(hit, kind)

    def _numbers(self, text: str) -> None:
        f: dict[str, Any] = {}
        m = search(_TRIED, text)
        if m:
            f["tried_gib"] = _gib(m, 1)
        m = search(_OLD, text)
        if m:
            f["device"] = int(m.group(1))
            f["total_gib"], f["allocated_gib"], f["free_gib"] = _gib(m, 2), _gib(m, 4), _gib(m, 6)
            reserved = _gib(m, 8)
            if reserved is not None and "cached" not in text:
                f["reserved_gib"] = reserved
                f["reserved_unallocated_gib"] = round(max(0.0, reserved - f["allocated_gib"]), 2)
        m = search(_NEW_TOTAL, text)
        if m:
            f["device"] = int(m.group(1))
            f["total_gib"], f["free_gib"] = _gib(m, 2), _gib(m, 4)
        m = search(_NEW_ALLOC, text)
        if m:
            f["allocated_gib"], f["reserved_unallocated_gib"] = _gib(m, 1), _gib(m, 5)
            if m.group(3):
                f["private_pools_gib"] = _gib(m, 3)
        m = search(_XLA_USED, text)
        if m:
            f["needed_gib"], f["total_gib"] = float(m.group(1)), float(m.group(2))
        f.update(_processes(text, f))
        self.facts.update({k: v for k, v in f.items() if v is not None})

    def _phase(self, hit: Hit, kind: str) -> str | None:
        if kind == "nccl":
            return "nccl_init" if search(_PHASES[0][1], hit.text) else "nccl_collective"
        context = "\n".join((*hit.before, hit.text, *hit.after))
        for name, pat in _PHASES:
            if search(pat, context):
                return name
        return None

    def finish(self, ctx: Context) -> list[Finding]:
        if not self.kinds:
            return []
        kind = max(self.kinds, key=lambda k: (k == "allocator", self.kinds[k]))
        f = dict(self.facts)
        if self.ranks:
            f["ranks"] = sorted(self.ranks)
        if self.phase:
            f["phase"] = self.phase
        f["count"] = self.ev.total
        where = f"GPU {f['device']}" if "device" in f else "the GPU"
        if self.ranks:
            where += f" (rank {ranks_text(self.ranks)})"
        title = f"CUDA out of memory on {where}"
        if "tried_gib" in f and "free_gib" in f:
            title += f": tried to allocate {f['tried_gib']} GiB with {f['free_gib']} GiB free"
            if "total_gib" in f:
                title += f" of {f['total_gib']} GiB"
        elif kind == "nccl":
            title += " while NCCL was allocating its buffers"
        elif kind == "xla":
            title = "XLA ran out of accelerator memory (RESOURCE_EXHAUSTED)" + (
                f": the program needs {f['needed_gib']} GiB of {f['total_gib']} GiB" if "needed_gib" in f else "")
        elif kind == "cublas_handle":
            title = (f"cuBLAS could not create its handle on {where}: usually no GPU memory was left for its "
                     "workspace (a CUDA install that does not match the driver is the other cause)")
        if "other_processes_gib" in f:
            title += f"; other processes hold {f['other_processes_gib']} GiB of it (PID {', '.join(map(str, f['other_pids']))})"
        if f.get("reserved_unallocated_gib", 0) > 2:
            title += f"; {f['reserved_unallocated_gib']} GiB reserved but unallocated (fragmentation)"
        if self.phase:
            title += f" during {self.phase.replace('_', ' ')}"
        return [Finding(symptom="cuda_oom", rule=f"cuda_oom.{kind}", title=title, severity="critical",
                        confidence={"cublas": 0.8, "cublas_handle": 0.6}.get(kind, 0.97), evidence=self.ev.items, facts=f,
                        first_line=self.ev.first())]


PARSERS = (OomParser,)
