"""Behaviours added from the eleventh wave of real logs (tests/corpus/wave11.jsonl): each fires on the programs' own
wording, and the near-miss beside it stays as it was."""
import pytest


def _xid(pci: str, xid: int, tail: str) -> str:
    return f"[Sun Nov 30 19:44:02 2026] NVRM: Xid (PCI:{pci}): {xid}, {tail}"


APP = "pid=2210754, name=pt_main_thread, Ch 00000008"
ECC = "pid='<unknown>', name=<unknown>, Contained: SM (0x1). RST: No, D-RST: No"
NVL = "NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x00000000 0x00000000 0x00000000 0x00000000 0x00000000)"


@pytest.mark.parametrize("lines,acting,named,unnamed", [
    # application Xids on two GPUs, a contained ECC error (reset) on a third: the reset concerns that one only
    ([_xid("0000:00:06", 43, APP), _xid("0000:00:09", 43, APP), _xid("0000:00:0a", 94, ECC)],
     ["PCI:0000:00:0a"], ["PCI:0000:00:0a"], ["PCI:0000:00:06", "PCI:0000:00:09"]),
    # two GPUs with NVLink Xids that drain the node, one with a contained ECC error: the drain's GPUs are named
    ([_xid("0018:01:00", 145, NVL), _xid("0019:01:00", 149, NVL), _xid("0000:9b:00", 94, ECC)],
     ["PCI:0018:01:00", "PCI:0019:01:00"], ["PCI:0018:01:00", "PCI:0019:01:00"], ["PCI:0000:9b:00"]),
    # near-miss: every Xid on one GPU
    ([_xid("0000:00:0a", 43, APP), _xid("0000:00:0a", 94, ECC)], ["PCI:0000:00:0a"], ["PCI:0000:00:0a"], []),
])
def test_an_xid_names_the_gpus_its_action_concerns(run, lines, acting, named, unnamed):
    f = run("\n".join(lines) + "\n").findings[0]
    assert f.symptom == "gpu_xid" and f.facts["action_pci"] == acting
    assert all(p in f.title for p in named) and not any(p in f.title for p in unnamed)
    assert all("pci" in x for x in f.facts["xids"])
