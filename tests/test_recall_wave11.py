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
    from bot.answer.titles_ko import title
    f = run("\n".join(lines) + "\n").findings[0]
    assert f.symptom == "gpu_xid" and f.facts["action_pci"] == acting
    for text in (f.title, title(f)):   # English and Korean
        assert all(p in text for p in named) and not any(p in text for p in unnamed)
    assert all("pci" in x for x in f.facts["xids"])


PLUGIN = ("compute-dy-p4d-1:21877:21929 [0] NCCL INFO NET/OFI Using aws-ofi-nccl 1.7.1-aws\n"
          "compute-dy-p4d-1:21877:21929 [0] configure_sendrecv_inorder:213 NCCL WARN NET/OFI Couldn't set {msg}\n"
          "Test NCCL failure common.cu:958 'unhandled system error (run with NCCL_DEBUG=INFO for details) / '\n")


@pytest.mark.parametrize("msg,mismatch", [
    # Libfabric has never heard of the option (ENOPROTOOPT): older than the one the plugin was compiled against
    ("FI_OPT_EFA_SENDRECV_IN_ORDER_ALIGNED_128_BYTES. RC: -92, ERROR: Protocol not available", True),
    ("FI_OPT_EFA_WRITE_IN_ORDER_ALIGNED_128_BYTES. RC: -92, ERROR: Protocol not available", True),
    # near-misses: the option is known but refused for this endpoint, or another errno
    ("FI_OPT_EFA_USE_DEVICE_RDMA. RC: -22, ERROR: Invalid argument", False),
    ("FI_OPT_EFA_RNR_RETRY. RC: -920, ERROR: Unknown error", False),
])
def test_a_plugin_newer_than_the_libfabric_it_loads_is_a_version_mismatch(run, msg, mismatch):
    d = run(PLUGIN.format(msg=msg))
    root = d.findings[0]
    if mismatch:
        assert root.rule == "version_mismatch.ofi_libfabric" and root.facts["option"] == msg.split(".")[0]
        assert root.facts["aws_ofi_nccl"] == "1.7.1" and root.steps[0].id == "version.libfabric"
        assert [f.symptom for f in d.findings] == ["version_mismatch", "nccl_error"]
    else:
        assert all(f.symptom != "version_mismatch" for f in d.findings) and root.symptom == "nccl_error"


def test_a_fact_with_nothing_in_it_is_left_out_of_the_text_but_kept_in_the_json(run):
    """A watchdog timeout where every rank in the log reports (NCCL RAS said all was well): no lagging rank is known.
    The text used to print "lagging_ranks= |"; the JSON contract still carries the empty list."""
    from bot.answer.render import diagnosis_text
    line = ("[rank{r}]:[E1128 03:12:44.417002913 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=1184410, OpType=ALLREDUCE, NumelIn=4326080, NumelOut=4326080, "
            "Timeout(ms)=1800000) ran for 1800052 milliseconds before timing out.")
    d = run("\n".join(line.format(r=r) for r in (77, 12)) + "\n")
    f = d.findings[0]
    assert f.symptom == "nccl_timeout" and f.facts["lagging_ranks"] == []
    text = diagnosis_text(d, verbose=True)
    assert "lagging_ranks" not in text and "reporting_ranks=12, 77" in text


EFA_FORK = ("A process has executed an operation involving a call\nto the fork() system call to create a child process.\n\n"
            "As a result, the libfabric EFA provider is operating in\na condition that could result in memory corruption "
            "or\nother system errors.\n\nFor the libfabric EFA provider to work safely when fork()\nis called, you will "
            "need to set the following environment\nvariable:\n          RDMAV_FORK_SAFE\n\nYour job will now abort.\n")
OMPI_FORK = ("--------------------------------------------------------------------------\nA process has executed an "
             "operation involving a call to the\n\"fork()\" system call to create a child process.  Open MPI is "
             "currently\noperating in a condition that could result in memory corruption or\nother system errors; your "
             "job may hang, crash, or produce silent\ndata corruption.  The use of fork() (or system() or other calls "
             "that\ncreate child processes) is strongly discouraged.\n")


@pytest.mark.parametrize("kernel,fork_safe", [(None, False), ("5.10.228-219.884.amzn2.x86_64", True),
                                              ("6.1.115-126.197.amzn2023.x86_64", False)])
def test_libfabric_aborting_a_fork_is_a_fork_failure_with_its_own_steps(run, kernel, fork_safe):
    """The EFA provider's abort notice: fork later or with forkserver/spawn; FI_EFA_FORK_SAFE=1 only on a kernel the
    log shows older than 5.15 (the seed's condition), never the RDMAV_FORK_SAFE the notice names; not the huge-page
    step, which is for fork() failing with ENOMEM."""
    head = f"Linux version {kernel} (mockbuild@builder) #1 SMP\n" if kernel else ""
    f = run(head + EFA_FORK).findings[0]
    ids = [s.id for s in f.steps]
    assert f.rule == "fork_enomem.efa_fork_abort" and f.facts["count"] == 1 and ids[0] == "fork_enomem.fork_after_efa"
    assert ("fork_enomem.fork_safe_old_kernel" in ids) == fork_safe and "fork_enomem.huge_pages" not in ids
    envs = {c.name: c.to for s in f.steps for c in s.changes if c.kind == "env"}
    assert envs.get("FI_EFA_FORK_SAFE") == (1 if fork_safe else None) and "RDMAV_FORK_SAFE" not in envs


def test_open_mpi_warning_about_a_fork_is_not_an_efa_abort(run):
    """Near-miss: Open MPI's own fork notice warns and goes on; it is not libfabric's EFA provider aborting."""
    assert run(OMPI_FORK).findings == []
