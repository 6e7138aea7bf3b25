"""Synthetic logs for the benchmark, with failures injected at known lines.

    python testkit/gen_logs.py nccl OUT.log --mb 1024     # interleaved 512-rank NCCL_DEBUG=INFO log over EFA
    python testkit/gen_logs.py megatron OUT.log --mb 200  # Megatron training log with one loss spike
    python testkit/gen_logs.py mixed OUT.log --mb 1024    # a 512-rank torchrun log: [rankN]: prefixes, NCCL INFO
                                                          # set-up interleaved with Megatron iterations, an OOM
    python testkit/gen_logs.py hf OUT.log --mb 200        # HF Trainer + DeepSpeed fp16 with tqdm written to a file
    python testkit/gen_logs.py mixed-pg OUT.log --mb 1024 # the second mixed layout (issue 33): new process groups'
                                                          # NCCL set-up all through the run, every rank's iterations

Prints a JSON object with the injected failures and their line numbers."""
from __future__ import annotations

import argparse
import json
import random
import sys

RANKS, PER_NODE = 512, 8


def host(rank: int) -> str:
    n = rank // PER_NODE
    return f"compute-st-p5-{n + 1}"


class Out:
    """A log file written in blocks of lines, counting its bytes and lines (where the injected failures land)."""

    def __init__(self, f) -> None:
        self.f, self.written, self.lineno = f, 0, 0

    def emit(self, lines: list[str]) -> None:
        if lines:
            text = "\n".join(lines) + "\n"
            self.f.write(text)
            self.written += len(text)
            self.lineno += len(lines)


def nccl_block(rng: random.Random, comm: int) -> list[str]:
    """One communicator's init as every rank logs it: bootstrap, plugin, channels, rings, trees."""
    out = []
    cid = f"0x{rng.getrandbits(48):x}"
    for rank in range(RANKS):
        h, d, pid = host(rank), rank % PER_NODE, 4000 + rank
        p = f"{h}:{pid}:{pid + 200} [{d}] NCCL INFO "
        out.append(p + f"comm {cid} rank {rank} nranks {RANKS} cudaDev {d} nvmlDev {d} busId {0x53 + d:x}000 commId 0x{comm:x} - Init START")
        for c in range(0, 32, 2):
            peer = (rank + PER_NODE) % RANKS
            out.append(p + f"Channel {c:02d}/0 : {rank}[{d}] -> {peer}[{d}] [send] via NET/AWS Libfabric/{d}/GDRDMA/Shared")
            out.append(p + f"Channel {c:02d}/0 : {rank}[{d}] -> {rank - d + (d + 1) % PER_NODE}[{(d + 1) % PER_NODE}] via P2P/CUMEM/read")
        out.append(p + f"Trees [0] {rank + 1}/-1/-1->{rank}->{rank - 1} [1] {rank + 1}/-1/-1->{rank}->{rank - 1}")
        out.append(p + "threadThresholds 8/8/64 | 4096/8/64 | 512 | 512")
        out.append(p + "Connected all rings")
        out.append(p + "Connected all trees")
        out.append(p + f"comm {cid} rank {rank} nranks {RANKS} cudaDev {d} nvmlDev {d} busId {0x53 + d:x}000 commId 0x{comm:x} - Init COMPLETE")
    return out


def nccl_header() -> list[str]:
    out = []
    for rank in range(RANKS):
        h, d, pid = host(rank), rank % PER_NODE, 4000 + rank
        p = f"{h}:{pid}:{pid} [{d}] NCCL INFO "
        out += [p + f"Bootstrap : Using enp71s0:10.1.{rank // 250}.{rank % 250}<0>", p + "cudaDriverVersion 12040",
                p + "NCCL version 2.21.5+cuda12.4", p + "NET/OFI Initializing aws-ofi-nccl 1.11.0-aws",
                p + "NET/OFI Using Libfabric version 1.22", p + "NET/OFI Selected Provider is efa (found 32 nics)",
                p + "Using network AWS Libfabric", p + "NCCL_SOCKET_IFNAME set by environment to ^docker,lo"]
    return out


def gen_nccl(path: str, mb: int, seed: int = 1) -> dict:
    rng = random.Random(seed)
    target = mb << 20
    injected = {}
    with open(path, "w") as f:
        out = Out(f)
        emit = out.emit
        emit(nccl_header())
        comm = 0
        plan = {0.3: "efa_mr_registration", 0.6: "gpu_xid", 0.9: "nccl_timeout"}
        while out.written < target:
            comm += 1
            emit(nccl_block(rng, comm))
            for frac, what in list(plan.items()):
                if out.written >= target * frac:
                    del plan[frac]
                    if what == "efa_mr_registration":
                        injected[what] = out.lineno + 1
                        emit([f"{host(77)}:4077:4277 [5] register_rail_mr_buffer:617 NCCL WARN NET/OFI Unable to register "
                              "memory (type = 2) for device 5. RC: -22, Error: Invalid argument"])
                    elif what == "gpu_xid":
                        injected[what] = out.lineno + 1
                        emit([f"Nov 12 04:17:55 {host(300)} kernel: NVRM: Xid (PCI:0000:a8:00): 79, pid=4300, name=python3, "
                              "GPU has fallen off the bus."])
                    else:
                        injected[what] = out.lineno + 1
                        lines = []
                        for r in range(RANKS):
                            seq = 1204 if r == 211 else 1205
                            lines.append(f"[rank{r}]:[E1104 03:12:44.{r:09d} ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog "
                                         f"caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
                                         "NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran for 600012 milliseconds "
                                         "before timing out.")
                        emit(lines)
    return {"file": path, "bytes": out.written, "lines": out.lineno, "injected": injected, "lagging_rank": 211}


def gen_megatron(path: str, mb: int, seed: int = 2) -> dict:
    rng = random.Random(seed)
    target = mb << 20
    it, spike_line = 0, None
    with open(path, "w") as f:
        out, buf = Out(f), []
        while out.written < target:
            it += 1
            loss = 2.5 - it * 2e-7 + rng.uniform(-0.02, 0.02)
            g = 0.25 + rng.uniform(-0.03, 0.03)
            if spike_line is None and out.written >= target // 2:
                loss, g = 7.91, 144.2
                spike_line = out.lineno + len(buf) + 1
            buf.append(f" iteration {it:8d}/ 2000000 | consumed samples: {it * 1024:12d} | elapsed time per iteration "
                       f"(ms): {3000 + rng.random() * 50:.1f} | learning rate: 1.000E-04 | global batch size:  1024 | lm "
                       f"loss: {loss:.6E} | loss scale: 1.0 | grad norm: {g:.3f} | number of skipped iterations:   0 | "
                       "number of nan iterations:   0 |")
            if len(buf) >= 5000:
                out.emit(buf)
                buf = []
        out.emit(buf)
    return {"file": path, "bytes": out.written, "lines": out.lineno, "injected": {"loss_spike": spike_line}}


def _iteration(it: int, loss: float, g: float, ms: float) -> str:
    return (f" [2026-11-30 10:00:00] iteration {it:8d}/ 2000000 | consumed samples: {it * 1024:12d} | elapsed time per "
            f"iteration (ms): {ms:.1f} | throughput per GPU (TFLOP/s/GPU): {420 * 3000 / ms:.1f} | learning rate: "
            f"1.000E-04 | global batch size:  1024 | lm loss: {loss:.6E} | loss scale: 1.0 | grad norm: {g:.3f} | "
            "number of skipped iterations:   0 | number of nan iterations:   0 |")


def gen_mixed(path: str, mb: int, seed: int = 3) -> dict:
    """What a real multi-node job's combined output looks like: torchrun's `[rankN]:` prefix on every line, each new
    communicator's NCCL INFO set-up from all 512 ranks, and between them the iteration lines that the last pipeline
    stage's ranks print; one loss spike half-way, one rank's CUDA OOM traceback at 80%."""
    rng = random.Random(seed)
    target, injected = mb << 20, {}
    it = comm = 0
    with open(path, "w") as f:
        out = Out(f)
        emit = out.emit
        emit([f"[rank{i // 8}]:{x}" for i, x in enumerate(nccl_header())])
        while out.written < target:
            comm += 1
            block = nccl_block(rng, comm)
            emit([f"[rank{min(i * RANKS // len(block), RANKS - 1)}]:{x}" for i, x in enumerate(block)])
            batch = []
            for _ in range(4000):
                it += 1
                loss, g = 2.5 - it * 2e-7 + rng.uniform(-0.02, 0.02), 0.25 + rng.uniform(-0.03, 0.03)
                if "loss_spike" not in injected and out.written >= target // 2 and it > 500:
                    loss, g = 7.91, 144.2
                    injected["loss_spike"] = out.lineno + len(batch) + 1   # the first rank's line of that step
                for r in range(RANKS - 8, RANKS, 2):   # the last stage's ranks all print the same step
                    batch.append(f"[rank{r}]:" + _iteration(it, loss, g, 3000 + rng.random() * 50))
            emit(batch)
            if "cuda_oom" not in injected and out.written >= target * 0.8:
                injected["cuda_oom"] = out.lineno + 5   # the error line of the traceback
                emit(["[rank211]:Traceback (most recent call last):",
                      '[rank211]:  File "/opt/megatron/pretrain_gpt.py", line 283, in <module>',
                      "[rank211]:    pretrain(train_valid_test_datasets_provider, model_provider,",
                      "[rank211]:  ...",
                      "[rank211]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
                      "capacity of 79.11 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has "
                      "78.04 GiB memory in use. Of the allocated memory 74.20 GiB is allocated by PyTorch, and 2.31 GiB "
                      "is reserved by PyTorch but unallocated."])
    return {"file": path, "bytes": out.written, "lines": out.lineno, "injected": injected}


def pg_setup(rng: random.Random, pg: int, size: int = 64) -> list[str]:
    """A new process group's NCCL set-up as its ranks log it mid-run (torchrun's [rankN]: prefix)."""
    out, cid, first = [], f"0x{rng.getrandbits(48):x}", (pg * size) % RANKS
    for k in range(size):
        rank = (first + k) % RANKS
        d = rank % PER_NODE
        p = f"[rank{rank}]:{host(rank)}:{4000 + rank}:{4300 + pg % 97} [{d}] NCCL INFO "
        out.append(p + "NET/OFI Selected Provider is efa (found 32 nics)")
        for c in range(4):
            out.append(p + f"Channel {c:02d}/0 : {k} -> {(k + 8) % size} via NET/AWS Libfabric/{d}/GDRDMA")
        out.append(p + "Connected all rings")
        out.append(p + f"comm {cid} rank {k} nranks {size} cudaDev {d} nvmlDev {d} busId {0x53 + d:x}000 commId "
                   f"0x{pg:x} - Init COMPLETE")
    return out


def gen_mixed_pg(path: str, mb: int, seed: int = 5) -> dict:
    """Issue 33's realistic layout: every rank prints each iteration line, and new process groups' NCCL set-up
    (provider, channels, rings, Init COMPLETE) keeps appearing between steps; one loss spike half-way, one rank's
    CUDA OOM at 80%."""
    rng = random.Random(seed)
    target, injected, it, pg = mb << 20, {}, 0, 0
    with open(path, "w") as f:
        out = Out(f)
        out.emit([f"[rank{i // 8}]:{x}" for i, x in enumerate(nccl_header())])
        while out.written < target:
            it += 1
            loss, g = 2.5 - it * 2e-7 + rng.uniform(-0.02, 0.02), 0.25 + rng.uniform(-0.03, 0.03)
            if "loss_spike" not in injected and out.written >= target // 2 and it > 50:
                loss, g = 7.91, 144.2
                injected["loss_spike"] = out.lineno + 1
            ms = 3000 + rng.random() * 50
            out.emit([f"[rank{r}]:" + _iteration(it, loss, g, ms) for r in range(RANKS)])
            if it % 3 == 0:
                pg += 1
                out.emit(pg_setup(rng, pg))
            if "cuda_oom" not in injected and out.written >= target * 0.8:
                injected["cuda_oom"] = out.lineno + 2
                out.emit(["[rank211]:Traceback (most recent call last):",
                          "[rank211]:torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has "
                          "a total capacity of 79.11 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this "
                          "process has 78.04 GiB memory in use. Of the allocated memory 74.20 GiB is allocated by "
                          "PyTorch, and 2.31 GiB is reserved by PyTorch but unallocated."])
    return {"file": path, "bytes": out.written, "lines": out.lineno, "injected": injected}


def _bar(step: int, total: int, sec: float) -> str:
    pct = 100 * step // total
    fill = "█" * (pct // 10) + ("▍" if pct % 10 >= 5 else "")
    el, rem = int(step * sec), int((total - step) * sec)
    return (f"\r{pct:3d}%|{fill:<10}| {step}/{total} [{el // 3600:02d}:{el // 60 % 60:02d}:{el % 60:02d}<"
            f"{rem // 3600:02d}:{rem // 60 % 60:02d}:{rem % 60:02d}, {sec:.2f}s/it]")


def gen_hf(path: str, mb: int, seed: int = 4) -> dict:
    """An HF Trainer run under DeepSpeed fp16 with stdout and stderr in one file, as `python train.py > log 2>&1`
    leaves it: tqdm redraws its bar with carriage returns, so a physical line is a run of bar updates ending in what
    was printed (a loss dict every 10 steps after tqdm.write's clearing, DeepSpeed's OVERFLOW lines glued to the bar
    while the loss scale settles); one loss spike half-way."""
    rng = random.Random(seed)
    target, total, step, spike_line = mb << 20, 2_000_000, 0, None
    with open(path, "w") as f:
        out, lines, pending = Out(f), [], []
        while out.written < target:
            step += 1
            pending.append(_bar(step, total, 1.9 + rng.random() * 0.2))
            if step <= 35 and step % 7 == 0:   # 65536 down to 2048, then the scale holds
                lines.append("".join(pending) + "[2026-11-30 10:00:00,018] [INFO] [loss_scaler.py:183:update_scale] "
                             f"[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {2 ** (17 - step // 7)}"
                             f", reducing to {2 ** (16 - step // 7)}")
                pending = []
            elif step % 10 == 0:
                loss, g = 2.5 - step * 2e-7 + rng.uniform(-0.02, 0.02), 0.8 + rng.uniform(-0.1, 0.1)
                if spike_line is None and out.written >= target // 2:
                    loss, g = 7.91, 144.2
                    spike_line = out.lineno + len(lines) + 1
                lines.append("".join(pending) + "\r" + " " * 60 + f"\r{{'loss': {loss:.4f}, 'grad_norm': {g:.4f}, "
                             f"'learning_rate': {2e-5 * (1 - step / total):.4e}, 'epoch': {step / 20000:.2f}}}")
                pending = []
            if len(lines) >= 2000:
                out.emit(lines)
                lines = []
        out.emit(lines)
    return {"file": path, "bytes": out.written, "lines": out.lineno, "injected": {"loss_spike": spike_line}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("kind", choices=["nccl", "megatron", "mixed", "mixed-pg", "hf"])
    ap.add_argument("out")
    ap.add_argument("--mb", type=int, default=100)
    a = ap.parse_args(argv)
    info = {"nccl": gen_nccl, "megatron": gen_megatron, "mixed": gen_mixed, "mixed-pg": gen_mixed_pg,
            "hf": gen_hf}[a.kind](a.out, a.mb)
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
