"""Lines built to make a careless pattern backtrack: each parser's trigger followed by a long run of what its
pattern accepts next. Used by the fuzz test and bench/fuzz.py."""

ADVERSARIAL_LINES = [
    "Watchdog caught collective operation timeout: WorkNCCL(" * 40, "OpType=" + "A" * 5000,
    "iteration " + "9" * 3000 + "/ | lm loss: " + "1" * 3000 + " |", "NVRM: Xid (PCI:" + "(" * 4000,
    "Tried to allocate " + "9." * 3000 + " GiB", "loss: " + "nan " * 2000, "[rank" + "1" * 5000 + "]:",
    "Expert usage: tensor([" + "1," * 4000 + "])", "Unable to register memory (type = " + "2" * 3000,
    "gpuId 0:\n" + "D " * 3000, "NCCL version " + "2." * 3000, "comm 0x" + "f" * 3000 + " rank 1 nranks 9",
    "Got completion from peer " + "1." * 2000 + " with status=12", "OSError: [Errno 12] " + "Cannot " * 1000,
    "{'loss': nan, 'buffer': '0x" + "f" * 3000,   # full case folding ("ff" = U+FB00) made this exponential
]
