"""Long fuzz run of every parser: random and adversarial lines through the whole engine.

    python bench/fuzz.py [--examples 3000]

Prints how many inputs ran, the slowest per-line time, and any exception (there must be none)."""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--examples", type=int, default=3000)
    a = ap.parse_args(argv)
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from core.ingest import UnusableInput, from_bytes
    from engine import Engine
    from playbooks.engine import load
    from testkit.adversarial import ADVERSARIAL_LINES

    engine = Engine(load())
    stats = {"runs": 0, "lines": 0, "worst_ms_per_line": 0.0, "findings": 0}

    @settings(max_examples=a.examples, deadline=None, suppress_health_check=list(HealthCheck))
    @given(lines=st.lists(st.one_of(st.text(max_size=400), st.sampled_from(ADVERSARIAL_LINES)), min_size=1, max_size=60))
    def run(lines):
        data = "\n".join(lines).encode("utf-8", errors="replace")
        t0 = time.perf_counter()
        try:
            d = engine.diagnose(from_bytes(data))
            stats["findings"] += len(d.findings)
        except UnusableInput:
            pass
        n = data.count(b"\n") + 1
        stats["runs"] += 1
        stats["lines"] += n
        stats["worst_ms_per_line"] = max(stats["worst_ms_per_line"], (time.perf_counter() - t0) * 1000 / n)

    t0 = time.perf_counter()
    run()
    print(f"{stats['runs']} inputs, {stats['lines']} lines in {time.perf_counter() - t0:.1f} s; no exception; "
          f"slowest {stats['worst_ms_per_line']:.2f} ms per line; {stats['findings']} findings on noise")
    return 0


if __name__ == "__main__":
    sys.exit(main())
