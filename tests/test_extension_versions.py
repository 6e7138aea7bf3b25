"""Version mismatches of compiled extensions, every generation a build or a load prints them in: the toolkit against
the one PyTorch was built with (torch's check and DeepSpeed's op builder), an nvcc or PyTorch build that does not know
the GPU, and an extension that lacks a symbol of the libraries it is loaded with. Near-misses stay quiet."""
import json

import pytest


def _first(d):
    return (d.findings[0].symptom, d.findings[0].rule) if d.findings else None


def test_deepspeeds_op_builder_cuda_check_is_a_cuda_build_mismatch_with_both_versions(run):
    d = run('    raise Exception(\n      Exception: >- DeepSpeed Op Builder: Installed CUDA version 12.1 does not match '
            'the version torch was compiled with 11.8, unable to compile cuda/cpp extensions without a matching cuda '
            'version.\n')
    assert _first(d) == ("version_mismatch", "version_mismatch.cuda_build")
    assert (d.findings[0].facts["cuda_detected"], d.findings[0].facts["cuda_torch_built"]) == ("12.1", "11.8")
    assert "11.8" in json.dumps(d.to_json_dict())


@pytest.mark.parametrize("line, missing", [
    ("nvcc fatal   : Unsupported gpu architecture 'compute_90'", "compute_90"),
    ("nvcc fatal   : Value 'sm_89' is not defined for option 'gpu-architecture'", "sm_89"),
    ("UserWarning: NVIDIA H100 80GB HBM3 with CUDA capability sm_90 is not compatible with the current PyTorch "
     "installation.", "sm_90"),
])
def test_a_toolkit_or_build_that_does_not_know_the_gpu(run, line, missing):
    d = run(line + "\nninja: build stopped: subcommand failed.\n")
    assert _first(d) == ("version_mismatch", "version_mismatch.arch_unsupported")
    assert d.findings[0].facts["missing"] == missing


def test_an_extension_missing_a_symbol_names_the_library_and_the_symbol(run):
    d = run("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    import flash_attn\n"
            "ImportError: /opt/venv/lib/python3.10/site-packages/flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so: "
            "undefined symbol: _ZN3c104cuda9SetDeviceEi\n")
    f = d.findings[0]
    assert (f.symptom, f.rule) == ("version_mismatch", "version_mismatch.extension_abi")
    assert f.facts["missing"] == "_ZN3c104cuda9SetDeviceEi"
    assert f.facts["library"] == "flash_attn_2_cuda.cpython-310-x86_64-linux-gnu.so"
    assert "version.rebuild_extension" in [s.id for s in f.steps]


def test_an_undefined_nccl_symbol_stays_the_nccl_abi_rule(run):
    d = run("ImportError: /opt/venv/lib/python3.10/site-packages/torch/lib/libtorch_cuda.so: undefined symbol: "
            "ncclCommRegister\n")
    assert _first(d) == ("version_mismatch", "version_mismatch.nccl_abi")


@pytest.mark.parametrize("text", [
    "nvcc: NVIDIA (R) Cuda compiler driver\nCuda compilation tools, release 12.4, V12.4.131\n",
    "Building extension module fused_adam...\nLoading extension module fused_adam...\nTime to load fused_adam op: 0.8 seconds\n",
])
def test_builds_that_went_fine_stay_quiet(run, text):
    assert run(text).findings == []
