"""Advice for the hardware the log shows (issue 30): a socket fallback on an InfiniBand cluster gets InfiniBand steps
(HCA port state, verbs modules, /dev/infiniband, NCCL_IB_HCA) and no EFA, libfabric or security-group step; on AWS
the EFA steps stay and no InfiniBand-only one appears."""
from test_advice_vocabulary import TCP

IB = ("gpu-node-07:41235:41235 [0] NCCL INFO Bootstrap : Using ib0:10.10.0.7<0>\n"
      "gpu-node-07:41235:41235 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0.\n"
      "gpu-node-07:41235:41235 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.\n"
      "gpu-node-07:41235:41235 [0] NCCL INFO NET/IB : No device found.\n"
      "gpu-node-07:41235:41235 [0] NCCL INFO NET/Socket : Using [0]ib0:10.10.0.7<0>\n"
      "gpu-node-07:41235:41235 [0] NCCL INFO Using network Socket\n"
      "gpu-node-08:39911:39911 [0] NCCL INFO NET/Socket : Using [0]ib0:10.10.0.8<0>\n"
      "gpu-node-08:39911:39911 [0] NCCL INFO Using network Socket\n")
EFA_WORDS = ("efa", "fi_info", "libfabric", "aws-ofi-nccl", "security group", "/opt/amazon")


def _said(d) -> str:
    f = d.findings[0]
    return " ".join([f.title] + [s.text for s in f.steps] + [c.name + str(c.note) for s in f.steps for c in s.changes])


def test_an_infiniband_cluster_gets_infiniband_steps_and_nothing_of_efa(run):
    d = run(IB)
    f = d.findings[0]
    assert f.symptom == "tcp_fallback" and f.facts["fabric"] == "infiniband"
    assert "instead of InfiniBand" in f.title and "net_plugin_missing" not in f.facts   # no plugin is needed on IB
    said = _said(d).lower()
    assert not [w for w in EFA_WORDS if w in said]
    names = {c.name for s in f.steps for c in s.changes}
    assert {"ibstat", "ls /dev/infiniband", "NCCL_IB_HCA", "ibv_devices"} <= names
    assert [s.id for s in f.steps][0] == "tcp_fallback.ib_port_state"


def test_infiniband_switched_off_is_undone_first_without_a_missing_device_step(run):
    d = run(IB.replace("NCCL_IB_DISABLE set by environment to 0.", "NCCL_IB_DISABLE set by environment to 1.")
            .replace("gpu-node-07:41235:41235 [0] NCCL INFO NET/IB : No device found.\n", ""))
    f = d.findings[0]
    ids = [s.id for s in f.steps]
    assert f.facts["fabric"] == "infiniband" and ids[0] == "tcp_fallback.ib_enable"
    assert "tcp_fallback.ib_port_state" not in ids


def test_aws_keeps_its_efa_steps_and_gets_no_infiniband_only_step(run):
    d = run(TCP)
    f = d.findings[0]
    assert f.facts["fabric"] == "efa" and "instead of EFA:" in f.title
    names = {c.name for s in f.steps for c in s.changes}
    assert "fi_info -p efa" in names and not {"ibstat", "NCCL_IB_HCA", "ibv_devices"} & names


def test_the_korean_title_names_the_fabric_too(run):
    from bot.answer.i18n import finding_title
    assert "InfiniBand 대신" in finding_title("ko", run(IB).findings[0])
    assert "EFA 대신" in finding_title("ko", run(TCP).findings[0])


def _stack(ofi: str, libfabric: str, nccl: str = "2.18.5") -> str:
    return (f"p5-1:1:1 [0] NCCL INFO NCCL version {nccl}+cuda12.2\n"
            f"p5-1:1:1 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl {ofi}-aws\n"
            f"p5-1:1:1 [0] NCCL INFO NET/OFI Using Libfabric version {libfabric}\n")


def test_an_old_efa_stack_is_named_first_with_the_runbooks_interim_settings(run):
    from core import versions as V
    d = run(_stack("1.5.0", "1.16") + TCP)
    f = d.findings[0]
    assert [s.id for s in f.steps][:2] == ["efa_provider.old_plugin", "efa_stack.libfabric_old"]
    assert f.steps[0].text.startswith("Upgrade aws-ofi-nccl: 1.5.0")
    assert {(c.name, c.to) for c in f.steps[0].changes} == {("FI_PROVIDER", "efa"), ("NCCL_PROTO", "simple")}
    # the weekly report judges the same versions by the same rules
    assert V.evaluate(d.versions)["ofi_needs_provider"] and V.evaluate(d.versions)["libfabric_old"]
    # near miss: a current stack gets neither step
    ids = [s.id for s in run(_stack("1.7.4", "1.19") + TCP).findings[0].steps]
    assert "efa_provider.old_plugin" not in ids and "efa_stack.libfabric_old" not in ids


MR_22 = ("p5-1:5515:5690 [4] register_rail_mr_buffer:617 NCCL WARN NET/OFI Unable to register memory (type = 2) for "
         "device 4. RC: -22, Error: Invalid argument\n")


def test_rc22_is_the_sync_memops_pairing_only_from_nccl_2_19(run):
    old = run("# EFA installer version: 1.28.0\n" + _stack("1.8.1", "1.19", nccl="2.18.3") + MR_22).findings[0]
    assert old.facts.get("ruled_out") == "cuda_sync_memops" and "cause" not in old.facts
    assert old.steps[0].id == "efa_mr.sync_memops_ruled_out" and "NCCL 2.18.3" in old.steps[0].text
    assert not any(c.name == "FI_EFA_SET_CUDA_SYNC_MEMOPS" for s in old.steps for c in s.changes)
    new = run("# EFA installer version: 1.28.0\n" + _stack("1.8.1", "1.19", nccl="2.20.3") + MR_22).findings[0]
    assert new.facts["cause"] == "cuda_sync_memops"
    assert ("FI_EFA_SET_CUDA_SYNC_MEMOPS", 0) in {(c.name, c.to) for c in new.steps[0].changes}


def test_a_gpu_fault_reads_ecc_and_remapper_state_before_any_reset_on_the_named_hosts(run):
    d = run("Nov  4 03:12:44 ip-10-4-12-88 kernel: NVRM: Xid (PCI:0000:a8:00): 79, pid=1, name=python3, "
            "GPU has fallen off the bus.\n"
            "Nov  4 03:12:45 ip-10-4-12-91 kernel: NVRM: Xid (PCI:0000:53:00): 79, pid=1, name=python3, "
            "GPU has fallen off the bus.\n")
    f = d.findings[0]
    ids = [s.id for s in f.steps]
    assert ids.index("gpu_xid.ecc_state") < ids.index("gpu_xid.reset")
    commands = [c.name for s in f.steps for c in s.changes]
    assert commands.index("nvidia-smi -q -d ECC,ROW_REMAPPER") < commands.index("nvidia-smi -r")
    drain = next(c for c in commands if c.startswith("scontrol"))
    assert "nodename=ip-10-4-12-88,ip-10-4-12-91 " in drain and "<node>" not in drain


def test_every_nccl_tests_command_runs_under_a_launcher(books):
    """`all_reduce_perf … -g 1` alone tests one GPU of one node: every nccl-tests command a playbook gives starts
    with srun (and names mpirun in its note)."""
    perf = [c for b in books for st in b.playbook["steps"] for c in st["changes"]
            if c["kind"] == "command" and "_perf " in c["name"]]
    assert perf and all(c["name"].split("srun ")[0].count("=") <= 1 and "srun --mpi=pmix --cpu-bind=cores " in c["name"]
                        and "mpirun" in (c["note"] or "") for c in perf)


def test_a_hangs_node_test_pairs_the_lagging_host_with_a_healthy_one(run):
    from test_advice_vocabulary import TIMEOUT
    lag = TIMEOUT.replace("[rank1]", "[rank3]").replace("[Rank 1]", "[Rank 3]").replace("SeqNum=1205", "SeqNum=1204")
    d = run("p5-st-1:1:1 [0] NCCL INFO comm 0x1 rank 0 nranks 4 cudaDev 0 busId 53000 - Init COMPLETE\n"
            "p5-st-2:2:2 [1] NCCL INFO comm 0x2 rank 3 nranks 4 cudaDev 1 busId 64000 - Init COMPLETE\n"
            + TIMEOUT.replace("[rank1]", "[rank0]").replace("[Rank 1]", "[Rank 0]") + lag)
    cmds = [c for s in d.findings[0].steps for c in s.changes if "all_reduce_perf" in c.name]
    assert cmds and cmds[0].name.startswith("srun --mpi=pmix --cpu-bind=cores -w p5-st-2,<healthy node> ")
    assert "mpirun -np 16 -H p5-st-2:8," in cmds[0].note


def test_a_p5_answer_names_no_p4d_default(run):
    d = run("h1:7:7 [0] NCCL INFO NCCL_MIN_NCHANNELS set by environment to 32\n" + TCP)
    texts = " ".join(s.text for s in d.findings[0].steps)
    assert "NCCL_MIN_NCHANNELS" in " ".join(c.name for s in d.findings[0].steps for c in s.changes)
    assert "p4d" not in texts
    d = run("h1:7:7 [0] NCCL INFO NCCL_MIN_NCHANNELS set by environment to 32\n" + TCP.replace("p5.48xlarge", "p4d.24xlarge"))
    assert "NCCL's default (8 on p4d)" in " ".join(s.text for s in d.findings[0].steps)
