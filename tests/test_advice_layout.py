"""Only valid layouts are recommended (issue 14): PP divides the layers, VPP divides a stage's layers, TP stays
within a node's 8 GPUs, and TP × PP divides the world size; the next size is computed from what the log shows."""
import pytest

from core import layout

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB " \
      "of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use.\n"


def _args(**kv) -> str:
    return "------------------------ arguments ------------------------\n" + "".join(
        f"  {k} {'.' * (48 - len(k))} {v}\n" for k, v in kv.items())


def _changes(d):
    return {c.name: (c.from_, c.to) for s in d.findings[0].steps for c in s.changes}


@pytest.mark.parametrize("job,pp", [
    ({"num_layers": 36, "tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 4}, 9),   # 8 does not divide 36
    ({"num_layers": 32, "tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 4}, 8),
    ({"num_layers": 36, "tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 4, "world_size": 64}, None),
    ({"num_layers": 40, "tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 2, "world_size": 64}, 4),
    ({"tensor_model_parallel_size": 8, "pipeline_model_parallel_size": 2}, 4),
])
def test_next_pipeline_size_divides_layers_and_world(job, pp):
    assert layout.next_pp(job) == pp


@pytest.mark.parametrize("job,tp", [
    ({"tensor_model_parallel_size": 4, "world_size": 16}, 8),
    ({"tensor_model_parallel_size": 4, "world_size": 12}, None),   # 12 GPUs cannot be split into TP 8 groups
    ({"tensor_model_parallel_size": 8}, None),                     # a node has 8 GPUs
    ({"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 3, "world_size": 24}, 4),
])
def test_next_tensor_size_stays_in_the_node_and_divides_the_world(job, tp):
    assert layout.next_tp(job) == tp


@pytest.mark.parametrize("layers,pp,vpp", [(36, 9, 2), (36, 12, None), (32, 8, 2), (24, 8, None), (None, 4, None),
                                            (24, 4, 2), (48, 4, 3), (36, 4, 3)])
def test_virtual_stages_divide_the_layers_of_a_stage(layers, pp, vpp):
    assert layout.vpp_for({"num_layers": layers} if layers else {}, pp) == vpp


def test_oom_with_36_layers_never_recommends_pp_8(run):
    d = run(_args(num_layers=36, tensor_model_parallel_size=8, pipeline_model_parallel_size=4, micro_batch_size=1) + OOM)
    ch = _changes(d)
    assert ch["--pipeline-model-parallel-size"] == (4, 9)
    assert ch["--virtual-pipeline-model-parallel-size"] == (None, 2)
    step = next(s for s in d.findings[0].steps if s.id == "cuda_oom.pipeline_parallel")
    assert "at least 36 micro-batches" in step.text


def test_no_pipeline_step_when_no_larger_size_is_valid(run):
    d = run(_args(num_layers=36, tensor_model_parallel_size=8, pipeline_model_parallel_size=4, world_size=64,
                  micro_batch_size=1) + OOM)
    assert "--pipeline-model-parallel-size" not in _changes(d)


def test_tp_doubles_only_when_the_world_splits_evenly(run):
    ok = run(_args(tensor_model_parallel_size=4, world_size=16, micro_batch_size=1) + OOM)
    bad = run(_args(tensor_model_parallel_size=4, world_size=12, micro_batch_size=1) + OOM)
    assert _changes(ok)["--tensor-model-parallel-size"] == (4, 8)
    assert "--tensor-model-parallel-size" not in _changes(bad)
