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
