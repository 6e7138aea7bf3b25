"""The seed's EFA/NCCL variable table, row by row (issue 14): each row's change appears only inside its version or
instance condition, the same log just outside the condition gets no such change, environment hygiene comes after
the root cause's own steps, and no change shows a current value the log did not print."""
import pytest

from playbooks.engine import PlaybookError, load

MR_22 = ("h1:7:9 [4] register_rail_mr_buffer:617 NCCL WARN NET/OFI Unable to register memory (type = 2) for device 4."
         " RC: -22, Error: Invalid argument\n")
HANG = ("[rank3]:[E ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: "
        "WorkNCCL(SeqNum=42, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600321 "
        "milliseconds before timing out.\n")


def _env(**env) -> str:
    return "".join(f"h1:7:7 [0] NCCL INFO {k} set by environment to {v}\n" for k, v in env.items())


def _stack(nccl="2.21.5", ofi="1.9.1", libfabric="1.21.0", kernel=None, installer=None, instance=None) -> str:
    out = f"h1:7:7 [0] NCCL INFO NCCL version {nccl}+cuda12.4\n"
    out += f"h1:7:7 [0] NCCL INFO NET/OFI Initializing aws-ofi-nccl {ofi}\n"
    out += f"h1:7:7 [0] NCCL INFO NET/OFI Using Libfabric version {libfabric}\n"
    if kernel:
        out += f"[    0.000000] Linux version {kernel}-1048-aws (buildd@lcy02) (gcc 11.4.0) #53-Ubuntu SMP\n"
    if installer:
        out += f"EFA installer version: {installer}\n"
    if instance:
        out += f"h1:7:7 [0] NCCL INFO NET/OFI Running on {instance}.48xlarge platform\n"
    return out


def _steps(d):
    return [s.id for s in d.findings[0].steps]


def _changes(d):
    return {(c.kind, c.name): (c.from_, c.to) for s in d.findings[0].steps for c in s.changes}


def test_hygiene_comes_after_the_root_cause_steps(run):
    d = run(_stack() + _env(FI_EFA_USE_DEVICE_RDMA=1, NCCL_MIN_NCHANNELS=32) + HANG)
    ids = _steps(d)
    assert d.findings[0].symptom == "nccl_timeout"
    first_cleanup = min(ids.index("efa_env.device_rdma"), ids.index("efa_env.channels"))
    assert all(not i.startswith("efa_env.") for i in ids[:first_cleanup])
    assert any(i.startswith("nccl_timeout.") for i in ids[:first_cleanup])
    step = d.findings[0].steps[first_cleanup]
    assert step.text.startswith("Also clean up:")


@pytest.mark.parametrize("kernel,removed", [("5.15.0", True), ("6.1.0", True), ("5.10.0", False), (None, False)])
def test_fork_safe_only_removed_on_kernel_5_15_or_newer(run, kernel, removed):
    d = run(_stack(kernel=kernel) + _env(FI_EFA_FORK_SAFE=1) + MR_22)
    assert ("efa_env.fork_safe" in _steps(d)) is removed


def test_kernel_from_an_environment_report_platform_line(run):
    d = run("- Platform: Linux-5.15.0-1051-aws-x86_64-with-glibc2.35\n" + _stack() + _env(FI_EFA_FORK_SAFE=1) + MR_22)
    assert "efa_env.fork_safe" in _steps(d)


@pytest.mark.parametrize("libfabric,ofi,removed", [("1.18", "1.7.0", True), ("1.18.0", "1.7.4", True),
                                                  ("1.17.1", "1.9.1", False), ("1.21.0", "1.6.0", False)])
def test_device_rdma_only_removed_at_libfabric_1_18_and_plugin_1_7(run, libfabric, ofi, removed):
    d = run(_stack(libfabric=libfabric, ofi=ofi) + _env(FI_EFA_USE_DEVICE_RDMA=1) + MR_22)
    assert (("env", "FI_EFA_USE_DEVICE_RDMA") in _changes(d)) is removed


@pytest.mark.parametrize("ofi,removed", [("1.16.3", True), ("1.17.0", True), ("1.16.2", False)])
def test_tuner_plugin_unneeded_from_1_16_3(run, ofi, removed):
    d = run(_stack(ofi=ofi) + _env(NCCL_TUNER_PLUGIN="/opt/amazon/ofi-nccl/lib/libnccl-ofi-tuner.so") + MR_22)
    assert ("efa_env.tuner_plugin" in _steps(d)) is removed


def test_no_op_and_noise_variables_are_cleaned_up(run):
    d = run(_stack() + _env(FI_EFA_ENABLE_SHM_TRANSFER=1, NCCL_NSOCKS_PERTHREAD=4, RDMAV_HUGEPAGES_SAFE=1,
                            NCCL_IB_GDR_LEVEL="PHB") + MR_22)
    ch = _changes(d)
    assert ch[("env", "FI_EFA_ENABLE_SHM_TRANSFER")] == ("1", None)
    assert ch[("env", "NCCL_NSOCKS_PERTHREAD")] == ("4", None)
    assert ch[("env", "RDMAV_HUGEPAGES_SAFE")] == ("1", None)
    assert ch[("env", "NCCL_IB_GDR_LEVEL")] == ("PHB", None)
    assert ch[("env", "NCCL_NET_GDR_LEVEL")] == (None, "PHB")   # the same level under its current name


@pytest.mark.parametrize("size,step", [("1048576", True), ("131072", False), ("262144", False), ("524288", False)])
def test_chunk_size_only_outside_the_table_values(run, size, step):
    d = run(_stack() + _env(NCCL_P2P_NET_CHUNKSIZE=size) + MR_22)
    assert ("efa_env.chunksize" in _steps(d)) is step


@pytest.mark.parametrize("ofi,cleanup", [("1.7.0", True), ("1.5.0", False)])
def test_proto_simple_is_a_workaround_for_old_plugins_only(run, ofi, cleanup):
    d = run(_stack(ofi=ofi) + _env(NCCL_PROTO="simple", FI_PROVIDER="efa") + MR_22)
    assert ("efa_env.proto" in _steps(d)) is cleanup
    assert ("efa_env.fi_provider" in _steps(d)) is cleanup


@pytest.mark.parametrize("instance,step", [("g5", True), ("p4d", False)])
def test_shm_cuda_memcpy_on_g5_g6_only(run, instance, step):
    d = run(_stack(instance=instance) + MR_22)
    assert (("env", "NCCL_SHM_USE_CUDA_MEMCPY") in _changes(d)) is step


@pytest.mark.parametrize("installer,nccl,env_change", [("1.29.0", "2.19.3", True), ("1.29.1", "2.19.3", False),
                                                       ("1.28.0", "2.18.5", False), (None, "2.21.5", False)])
def test_sync_memops_only_inside_its_version_pair(run, installer, nccl, env_change):
    d = run(_stack(nccl=nccl, installer=installer) + MR_22)
    assert (("env", "FI_EFA_SET_CUDA_SYNC_MEMOPS") in _changes(d)) is env_change
    if installer is None:   # unknown installer: tell them to check it, set nothing
        assert ("command", "cat /opt/amazon/efa_installed_packages") in _changes(d)


_NO_PLUGIN = "h1:7:7 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.\n"
_SOCKETS = ("h1:7:9 [0] NCCL INFO NET/Socket : Using [0]ens32:10.0.3.7<0>\nh1:7:9 [0] NCCL INFO Using network Socket\n"
            "h1:7:9 [0] NCCL INFO comm 0x5 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0\n"
            "h1:7:9 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/Socket/0\n")


def test_a_missing_plugin_is_the_fallback_cause_and_its_step_comes_first(run):
    d = run(_NO_PLUGIN + "h1:7:7 [0] NCCL INFO NET/OFI Running on p4d.24xlarge platform\n" + _SOCKETS)
    f = d.findings[0]
    assert f.symptom == "tcp_fallback" and f.facts["net_plugin_missing"] == "libnccl-net.so"
    assert "could not load the network plugin (libnccl-net.so)" in f.title
    assert any("Could not find: libnccl-net.so" in e.text for e in f.evidence)
    assert _steps(d)[0] == "tcp_fallback.plugin_path"
    assert ("command", "fi_info -p efa") in _changes(d)


@pytest.mark.parametrize("instance,iface,en", [("p4d.24xlarge", "docker0", True), (None, "docker0", False),
                                               ("p4d.24xlarge", "ens32", False)])
def test_socket_ifname_en_only_on_p4d_p5_where_nccl_took_another_interface(run, instance, iface, en):
    head = f"h1:7:7 [0] NCCL INFO NET/OFI Running on {instance} platform\n" if instance else ""
    d = run(_NO_PLUGIN + head + _SOCKETS.replace("ens32", iface))
    assert (_changes(d).get(("env", "NCCL_SOCKET_IFNAME")) == (None, "en")) is en


def test_a_socket_ifname_the_job_sets_is_not_overridden(run):
    d = run(_NO_PLUGIN + "h1:7:7 [0] NCCL INFO NET/OFI Running on p5.48xlarge platform\n"
            + _env(NCCL_SOCKET_IFNAME="ens") + _SOCKETS)
    assert ("env", "NCCL_SOCKET_IFNAME") not in _changes(d)


def test_single_node_socket_with_no_plugin_stays_healthy(run):
    d = run(_NO_PLUGIN + "h1:7:9 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.3.7<0>\n"
            "h1:7:9 [0] NCCL INFO Using network Socket\n"
            "h1:7:9 [0] NCCL INFO comm 0x5 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0\n")
    assert d.findings == []


@pytest.mark.parametrize("now,to", [("PHB", "PXB"), ("PXB", "PIX"), ("SYS", "PHB"), (None, "PXB")])
def test_gdr_level_steps_down_one_notch_from_what_the_job_sets(run, now, to):
    env = _env(NCCL_NET_GDR_LEVEL=now) if now else ""
    d = run(env + "n:1:2 [0] transport/net_ib.cc:1374 NCCL WARN NET/IB : Got completion from peer 10.0.0.2<4521> "
                  "with status=4 opcode=0 len=0 vendor err 81 (Send) localGid ::ffff:10.0.0.1\n")
    assert _changes(d)[("env", "NCCL_NET_GDR_LEVEL")] == (now, to)


def test_old_plugin_needs_provider_only_on_p4_p5(run):
    base = _stack(ofi="1.5.0") + "Aborting: no provider: NET/OFI Couldn't find any optimal provider\n"
    on_p4d = run(base + "x NCCL INFO NET/OFI Running on p4d.24xlarge platform\n")
    on_g5 = run(base + "x NCCL INFO NET/OFI Running on g5.48xlarge platform\n")
    assert _changes(on_p4d)[("env", "FI_PROVIDER")] == (None, "efa")
    assert ("env", "FI_PROVIDER") not in _changes(on_g5)


def _user_book(tmp_path, change: str):
    d = tmp_path / "books"
    d.mkdir()
    (d / "team.yaml").write_text(
        "playbooks:\n  - symptom: moe_imbalance\n    steps:\n      - id: team.aux\n        owner: ml\n"
        f"        text: raise it\n        changes:\n          - {change}\n        cite: [moe#aux-loss]\n")
    return d


@pytest.mark.parametrize("change,why", [
    ('{kind: flag, name: "--moe-aux-loss-coeff", from: 0.01, to: 0.05}', "'0.01' is not read from the log"),
    ('{kind: flag, name: "--moe-aux-loss-coeff", from: {ref: job.moe_aux_loss_coeff, default: 0.01}, to: 0.05}',
     "a default (0.01) would be shown"),
])
def test_a_from_value_must_come_from_the_log(tmp_path, change, why):
    with pytest.raises(PlaybookError, match="from: " + why.replace("(", r"\(").replace(")", r"\)")):
        load([_user_book(tmp_path, change)])


def test_a_from_read_from_the_log_loads(tmp_path):
    load([_user_book(tmp_path, '{kind: flag, name: "--moe-aux-loss-coeff", from: {ref: job.moe_aux_loss_coeff}, '
                               'to: 0.05}')])


def test_no_builtin_change_shows_a_from_the_log_did_not_print(run):
    d = run("[rank0]: iteration 10 | tokens per expert: [4210, 11, 3902, 8, 4377, 2, 4121, 5]\n"
            "[rank0]: iteration 20 | tokens per expert: [4302, 9, 3811, 3, 4420, 6, 4090, 4]\n"
            "[rank0]: token drop rate: 0.21\n")
    assert d.findings[0].symptom == "moe_imbalance"
    assert all(c.from_ is None for s in d.findings[0].steps for c in s.changes)
