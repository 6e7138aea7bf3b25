"""Seed items the playbooks were missing (issue 14): the GPU's own NVLink count, the 12-byte memory figure beside
the 18-byte one, infra network checks under EFA errors, stack versions and `fi_info -p efa` for a TCP fallback."""
from conftest import FIXTURES

import pytest


def _links(gpu_line: str):
    return (f"$ nvidia-smi nvlink -s\n{gpu_line}\n\t Link 0: 25 GB/s\n\t Link 1: <inactive>\n")


@pytest.mark.parametrize("gpu,expected", [
    ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)", 12),
    ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)", 18),
    ("GPU 0: NVIDIA B200 (UUID: GPU-1)", 18),
])
def test_nvlink_expected_links_follow_the_gpu(run, gpu, expected):
    f = run(_links(gpu)).findings[0]
    assert f.facts["expected_links"] == expected
    cmds = [c.name for s in f.steps for c in s.changes]
    assert f"dcgmi diag -r 2 -p pcie.gpu_nvlinks_expected_up={expected}" in cmds


def test_nvlink_count_from_the_instance_when_the_gpu_is_not_named(run):
    f = run("x NCCL INFO NET/OFI Running on p4d.24xlarge platform\nGPU 0: (UUID: GPU-1)\n"
            "\t Link 3: <inactive>\n").findings[0]
    assert (f.facts["gpu_model"], f.facts["expected_links"]) == ("A100", 12)   # p4d carries A100s
    assert any("expected_up=12" in c.name for s in f.steps for c in s.changes)


def test_nvlink_without_a_gpu_name_gives_both_figures_and_no_guess(run):
    f = run("Link 3: <inactive>\n" + _links("GPU 0: (UUID: GPU-1)")).findings[0]
    cmds = [c.name for s in f.steps for c in s.changes]
    assert not any("expected_up" in c for c in cmds)
    assert "12 per GPU on A100" in f.steps[0].text


def test_memory_math_shows_both_counts(run):
    d = run("  number of parameters on (tensor, pipeline) model parallel rank (0, 0): 70000000000\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n")
    step = next(s for s in d.findings[0].steps if s.id == "cuda_oom.memory_math")
    assert "1173.5 GiB" in step.text and "782.3 GiB by the 12-byte count" in step.text


def test_efa_completion_error_gets_the_network_checks(run):
    d = run((FIXTURES / "nccl_error" / "efa_completion.log").read_bytes())
    ids = [s.id for s in d.findings[0].steps]
    assert ids.index("nccl_error.efa_peer") < ids.index("nccl_error.efa_network")


def test_tcp_fallback_checks_the_stack_and_the_provider(run):
    d = run("h:1:1 [0] NCCL INFO NET/OFI Running on p5.48xlarge platform\n"
            "h:1:2 [0] NCCL INFO NET/Socket : Using [0]ens32:10.0.0.2<0>\nh:1:2 [0] NCCL INFO Using network Socket\n"
            "h:1:2 [0] NCCL INFO comm 0x5 rank 0 nRanks 16 nNodes 2 localRanks 8 localRank 0 MNNVL 0\n")
    names = [c.name for s in d.findings[0].steps for c in s.changes]
    assert "fi_info -p efa" in names and "fi_info --version" in names
    assert names.count("fi_info -p efa") == 1


def test_megatron_oom_ladder_ends_in_cpu_offload(run):
    """Seed 000 §1.3's ladder ends in ZeRO-3 + offload; Megatron's counterpart is its CPU optimizer on top of the
    distributed optimizer, after the sharding and model-parallel rungs (issue 30)."""
    from conftest import ROOT
    d = run((ROOT / "examples" / "p5-megatron-oom.log").read_text())
    ids = [s.id for s in d.findings[0].steps if not s.cleanup]
    assert ids[-1] == "cuda_oom.zero3_offload"
    assert ids.index("cuda_oom.zero2") < ids.index("cuda_oom.tensor_parallel") < ids.index("cuda_oom.zero3_offload")
    last = d.findings[0].steps[ids.index("cuda_oom.zero3_offload")]
    assert {c.name for c in last.changes} >= {"--optimizer-cpu-offload", "--use-precision-aware-optimizer"}
    assert not any(c.name.startswith("zero_optimization") for s in d.findings[0].steps for c in s.changes)


def test_slow_nccl_tests_get_the_seeds_bottleneck_experiments_as_single_runs(run):
    """Seed 000 §1.4: algorithm and protocol are Auto by default and forced only as experiments; on HyperPod Slurm,
    launch with --mpi=pmix and --cpu-bind=cores (issue 30). The experiments set the variable for one nccl-tests run,
    never for the job."""
    head = "#  Rank  0 Group  0 Pid   1 on  p5-st-1 device  0 [0x53] NVIDIA H100 80GB HBM3\n"
    rows = "".join(f"  {size:>12}  {size // 4:>12}     float     sum      -1   {t:>8}   {a:>6}  {b:>6}      0\n"
                   for size, t, a, b in ((67108864, "2000.1", "33.55", "62.91"), (1073741824, "29000", "37.03", "69.42")))
    d = run("p5-st-1:1:1 [0] NCCL INFO NET/OFI Running on p5.48xlarge platform\n"
            "#  nThread 1 nGpus 1 minBytes 67108864 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20\n"
            + head + head.replace("p5-st-1", "p5-st-2").replace("Rank  0", "Rank  8") + rows)
    f = d.findings[0]
    assert f.symptom == "slow_comm"
    step = next(s for s in f.steps if s.id == "slow_comm.nccl_experiments")
    assert [c.name.split(" srun ")[0] for c in step.changes] == ["NCCL_ALGO=Ring", "NCCL_PROTO=Simple"]
    assert all(c.kind == "command" and "--mpi=pmix --cpu-bind=cores" in c.name for c in step.changes)
    assert not any(c.kind == "env" and c.name in ("NCCL_ALGO", "NCCL_PROTO") for s in f.steps for c in s.changes)


def test_slow_communication_gets_the_seeds_monitoring_checks_last(run):
    """Seed 003's monitoring rows for communication: NIC counters (ethtool -S) and NCCL's topology dump, as a check
    after the root cause's own steps (issue 30)."""
    from conftest import FIXTURES
    d = run((FIXTURES / "slow_comm" / "nccl_tests_p5_two_nodes_low.log").read_text())
    steps = d.findings[0].steps
    mon = next(s for s in steps if s.id == "slow_comm.monitor")
    assert mon.cleanup and steps.index(mon) > max(i for i, s in enumerate(steps) if not s.cleanup)
    names = " ".join(c.name for c in mon.changes)
    assert "ethtool -S" in names and "NCCL_TOPO_DUMP_FILE=" in names
