"""One prefix normaliser ahead of every reader: a transport's noise (paste quoting, time stamps, syslog headers,
CloudWatch and Kubernetes CRI stamps) and a launcher's identity labels (srun -l, torchrun [defaultN]: / [rankN]:,
mpirun --tag-output, Ray actors), alone or nested, never change what a log is diagnosed as, nor its evidence (the
program's own line), and the rank a label names still counts."""
import json

import pytest

from conftest import FIXTURES
from parsers.scan.base import unprefix

PREFIXES = {
    "quote": lambda i, l: "> " + l,
    "iso-stamp": lambda i, l: f"2025-03-04T12:{i % 60:02d}:07.123456Z " + l,
    "bracket-stamp": lambda i, l: f"[2025-03-04 12:00:{i % 60:02d},123] " + l,
    "syslog": lambda i, l: f"Mar  4 12:{i % 60:02d}:07 gpu-node-07 python[4242]: " + l,
    "cloudwatch": lambda i, l: f"2025-03-04T12:00:07.123Z\t{l}",
    "k8s-cri": lambda i, l: f"2025-03-04T12:00:07.123456789Z stderr F {l}",
    "srun-and-torchrun": lambda i, l: "3: [default0]:" + l,
    "mpirun": lambda i, l: "[1,3]<stderr>:" + l,
    "ray": lambda i, l: "(RayTrainWorker pid=4242, ip=10.1.2.3) " + l,
    "stamp-inside-a-label": lambda i, l: f"12: 2025-03-04 12:00:{i % 60:02d} " + l,
}
LOGS = sorted(p for p in FIXTURES.rglob("*.log") if p.parent.name not in ("report", "configs", "multinode", "team"))


def _top(d):
    return [(f.symptom, f.rule) for f in d.findings[:1]]


@pytest.mark.parametrize("kind", sorted(PREFIXES))
def test_every_fixture_reads_the_same_behind_a_prefix(run, kind):
    wrap, changed = PREFIXES[kind], []
    for path in LOGS:
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = text.split("\n")
        wrapped = "\n".join(wrap(i, l) if l else l for i, l in enumerate(lines))
        plain, behind = run(text), run(wrapped)
        if _top(plain) != _top(behind):
            changed.append(f"{path.relative_to(FIXTURES)}: {_top(plain)} -> {_top(behind)}")
            continue
        # (the chunk-wide readers of big Megatron logs show the whole line they matched, prefixes and all)
        if [(e.line, unprefix(e.text)[2].strip()) for f in plain.findings[:1] for e in f.evidence] != \
                [(e.line, unprefix(e.text)[2].strip()) for f in behind.findings[:1] for e in f.evidence]:
            changed.append(f"{path.relative_to(FIXTURES)}: other evidence")
    assert not changed, "\n".join(changed)


def test_noise_is_cut_and_identity_is_kept_in_order():
    assert unprefix("> > NCCL WARN x") == ("> > ", "", "NCCL WARN x")
    assert unprefix("2025-03-04T12:00:07.1Z stdout F [rank3]: hi") == ("2025-03-04T12:00:07.1Z stdout F ", "[rank3]: ", "hi")
    assert unprefix("3: [default0]:2025-03-04 12:00:07 loss 1") == ("2025-03-04 12:00:07 ", "3: [default0]:", "loss 1")
    assert unprefix("Mar  4 12:00:07 gpu-07 kernel: [1.2] NVRM: Xid")[0] == "Mar  4 12:00:07 gpu-07 kernel: "


@pytest.mark.parametrize("line", [
    "Traceback (most recent call last):",
    "[E1104 03:12:44.118230411 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation timeout",
    "12:00:07 is not a stamp this reader cuts",
    "[0] NCCL INFO Channel 00/02",
    "    0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |",
    "Mar  4 is a date, not a syslog header",
    "iteration      100/  1000 | consumed samples: 3200 | lm loss: 2.1",
])
def test_program_text_is_never_taken_for_a_prefix(line):
    cut, label, rest = unprefix(line)
    assert (cut, label, rest) == ("", "", line)


def test_a_rank_named_by_a_launcher_label_still_counts(run):
    lines = [f"[rank{r}]:[E1104 03:12:44.118230411 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
             "operation timeout: WorkNCCL(SeqNum=1205, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, "
             "Timeout(ms)=600000) ran for 600012 milliseconds before timing out." for r in (0, 1, 2)]
    plain = run("\n".join(lines) + "\n").findings[0]
    quoted = run("\n".join("> 2025-03-04T12:00:07Z " + l for l in lines) + "\n").findings[0]
    assert plain.symptom == quoted.symptom == "nccl_timeout"
    assert json.dumps(plain.facts, sort_keys=True, default=str) == json.dumps(quoted.facts, sort_keys=True, default=str)
