"""Line families alone, each against the shell pipeline a person would run on the same file for the same answers:
`grep -F` with 25 literals they would type (not the parsers' trigger list) plus `grep -oE` for the loss series —
the worst cases of issue 16, measured as that issue states them. Part of `make bench`; alone:

    python bench/families.py [--mb 50]"""
from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.timing import HF_LOSS, MEGATRON_LOSS, RUNS, TRIAGE, best_of, errors_and_loss  # noqa: E402

PERSON = ("CUDA out of memory", "OutOfMemoryError", "NCCL WARN", "Watchdog caught", "timed out", "Xid",
          "fallen off the bus", "NaN", "nan", "Traceback", "RuntimeError", "Error", "error", "ncclInternalError",
          "ncclSystemError", "ncclUnhandledCudaError", "register_rail_mr_buffer", "NET/Socket", "Selected Provider is",
          "fi_getinfo", "Cannot allocate memory", "inactive", "SIGKILL", "exitcode", "loss")


def _lines(kind: str, rnd: random.Random, i: int) -> str:
    if kind == "hf-dicts":
        return (f"{{'loss': {2.5 - i * 1e-6 + rnd.random() * 0.05:.4f}, 'grad_norm': {0.8 + rnd.random() * 0.1:.3f}, "
                f"'learning_rate': 1.9e-05, 'epoch': {i / 10000:.2f}}}\n")
    if kind == "dashes":
        return "-" * 120 + "\n"
    if kind == "nccl-setup":
        r = i % 512
        return (f"compute-st-p5-{r // 8}:{4000 + r}:{4100 + r} [{r % 8}] NCCL INFO Channel {i % 32:02d}/0 : {r} -> "
                f"{(r + 8) % 512} [send] via NET/AWS Libfabric/{r % 32}/GDRDMA\n")
    if kind == "distinct-errors":
        return f"[rank{i % 512}]: RuntimeError: shard {i} failed to load from /fsx/ckpt/{i:08x}.bin after {i % 7} tries\n"
    if kind == "distinct-nccl-warn":
        return (f"compute-st-p5-{i % 64}:{4000 + i % 512}:{i} [{i % 8}] NCCL WARN NET/OFI Request {i:x} completed "
                f"with error. RC: {i % 20}. Error: {i % 5}\n")
    raise ValueError(kind)


KINDS = ("hf-dicts", "dashes", "nccl-setup", "distinct-errors", "distinct-nccl-warn")


def write(kind: str, path: Path, mb: int) -> None:
    rnd, size, i = random.Random(7), mb << 20, 0
    with open(path, "w") as f:
        while f.tell() < size:
            f.write("".join(_lines(kind, rnd, i + k) for k in range(2000)))
            i += 2000


def run(work: Path, mb: int, target) -> None:
    literals = work / "person-literals.txt"
    literals.write_text("\n".join(PERSON) + "\n")
    for kind in KINDS:
        log = work / f"{kind}-{mb}mb.log"
        write(kind, log, mb)
        tri, rss, _ = best_of(RUNS, [*TRIAGE, "diagnose", "--json", str(log)])
        base = errors_and_loss(literals, f"'{log}'", HF_LOSS if kind == "hf-dicts" else MEGATRON_LOSS)
        target(f"{kind} {mb} MiB, triage / (grep -F 25 literals + grep -oE loss)",
               f"{tri / base:.1f}x ({tri:.2f} s vs {base:.2f} s), RSS {rss} MiB", "<= 3x, <= 200 MiB",
               tri <= 3 * base and rss <= 200)


def main(argv=None) -> int:
    import tempfile
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=50)
    a = ap.parse_args(argv)
    run(Path(tempfile.mkdtemp(prefix="triage-families-")), a.mb,
        lambda n, m, g, ok: print(f"{'MET    ' if ok else 'NOT MET'}  {n}: {m} (target {g})", flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
