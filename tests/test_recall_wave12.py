"""Behaviours added from the twelfth wave (tests/corpus/wave12.jsonl): NCCL's EFA channels without GPUDirect RDMA on
an instance that offers it, and the near-misses beside it that stay quiet."""
import json
from pathlib import Path

import pytest

CORPUS = Path(__file__).parent / "corpus" / "wave12.jsonl"
P5 = json.loads(CORPUS.read_text().splitlines()[0])["text"]



def test_efa_channels_without_gdrdma_on_p5_are_slow_comm_with_the_seed_step(run):
    d = run(P5)
    f = d.findings[0]
    assert (f.symptom, f.rule) == ("slow_comm", "slow_comm.no_gdrdma")
    assert f.facts == {"instance": "p5", "net_channel_lines": 5} and f.evidence[0].line == 13
    text = json.dumps(d.to_json_dict())
    # libfabric 1.16 / aws-ofi-nccl 1.6.0: below the seed's floor, so the variable is set (and cited)
    assert "FI_EFA_USE_DEVICE_RDMA" in text and "efa#no-gdrdma" in text


def test_newer_libfabric_and_plugin_get_no_device_rdma_variable(run):
    newer = P5.replace("aws-ofi-nccl 1.6.0-aws", "aws-ofi-nccl 1.13.2-aws").replace("Libfabric version 1.16",
                                                                                     "Libfabric version 1.22")
    d = run(newer)
    assert d.findings[0].rule == "slow_comm.no_gdrdma"
    assert "FI_EFA_USE_DEVICE_RDMA" not in json.dumps(d.to_json_dict())   # outside the seed's condition
    assert "nvidia_peermem" in json.dumps(d.to_json_dict())


@pytest.mark.parametrize("edit", [
    # one channel with GPUDirect RDMA: it is available, the others are NCCL's choice
    lambda t: t.replace("[send] via NET/AWS Libfabric/31", "[send] via NET/AWS Libfabric/31/GDRDMA"),
    # no platform line: the instance could be a p3dn, which offers no GPUDirect RDMA
    lambda t: "\n".join(x for x in t.splitlines() if "platform" not in x and "p5.48xl" not in x) + "\n",
    # the plugin runs over libfabric's TCP provider: a TCP fallback, not this
    lambda t: t.replace("Selected Provider is efa (found 32 nics)", "Selected provider is tcp"),
])
def test_near_misses_stay_quiet(run, edit):
    d = run(edit(P5))
    assert "slow_comm.no_gdrdma" not in [f.rule for f in d.findings]


def test_the_korean_title_names_the_instance(run):
    from bot.answer.titles_ko import title
    assert "p5" in title(run(P5).findings[0]) and "GPUDirect RDMA" in title(run(P5).findings[0])


def test_channel_lines_counted_across_chunks_and_stop_once_gdrdma_shows():
    from parsers.gdr import CHANNELS, GdrWatch
    from parsers.scan.rows import State, python_rows
    w, state = GdrWatch(), State()

    def feed(buf: bytes, start_no: int) -> None:   # (the scanner feeds a family's rows chunk by chunk)
        w.feed_rows(python_rows(buf, [CHANNELS], start_no, state)[0])
    feed(b"x\nh:1:2 [0] NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/AWS Libfabric/0\n", 10)
    feed(b"h:1:2 [0] NCCL INFO Channel 01/0 : 1[1] -> 0[0] [receive] via NET/Libfabric/1\n", 12)
    assert (w.channels, w.first[0], w.gdr) == (2, 12, False)
    feed(b"h:1:2 [0] NCCL INFO Channel 02/0 : 1[1] -> 0[0] [send] via NET/AWS Libfabric/2/GDRDMA\n", 13)
    feed(b"h:1:2 [0] NCCL INFO Channel 03/0 : 1[1] -> 0[0] [send] via NET/AWS Libfabric/3\n", 14)
    assert w.gdr and w.channels == 2


@pytest.mark.parametrize("env,changed", [
    ("FI_EFA_USE_DEVICE_RDMA set by environment to 0", {"FI_EFA_USE_DEVICE_RDMA": ("0", "1")}),
    ("FI_EFA_USE_DEVICE_RDMA set by environment to 1", {}),   # already set: no change that changes nothing
    ("NCCL_NET_GDR_LEVEL set by environment to LOC", {"FI_EFA_USE_DEVICE_RDMA": (None, "1"),
                                                       "NCCL_NET_GDR_LEVEL": ("LOC", None)}),
])
def test_env_changes_start_from_what_the_log_shows(run, env, changed):
    text = P5.replace("NCCL INFO cudaDriverVersion 12020", f"NCCL INFO {env}")
    d = run(text).to_json_dict()
    got = {c["name"]: (c.get("from"), c.get("to")) for s in d["findings"][0]["steps"] for c in s["changes"]
           if c["kind"] == "env" and c["name"] in ("FI_EFA_USE_DEVICE_RDMA", "NCCL_NET_GDR_LEVEL")}
    assert got == changed
