"""Advice in the job's own framework (issue 14): the framework is read from the log, and every change uses its
names — Megatron flags, DeepSpeed config keys, HF Trainer arguments, Lightning Trainer arguments, FSDP knobs — with
values read from that framework's own dumps. A job never gets another framework's vocabulary."""
import pytest

SPIKE = [1.4412, 1.4305, 1.4251, 1.4198, 7.9013]

HF = ("***** Running training *****\nTrainingArguments(\n_n_gpu=1,\nbf16=False,\nfp16=True,\n"
      "gradient_accumulation_steps=2,\ngradient_checkpointing=False,\nlearning_rate=2e-05,\nmax_grad_norm=1.0,\n"
      "per_device_train_batch_size=8,\n)\n")
HF_SPIKE = HF + "".join(f"{{'loss': {v}, 'grad_norm': 0.9, 'learning_rate': 1.9e-05, 'epoch': {i / 10}}}\n"
                        for i, v in enumerate(SPIKE, 1))
LIGHTNING_SPIKE = ("LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0,1,2,3]\n"
                   "Using 16bit Automatic Mixed Precision (AMP)\n"
                   + "".join(f"step {i * 50}: train_loss={v}\n" for i, v in enumerate(SPIKE, 1)))
DS_SPIKE = ("[2024-05-03 10:12:01,332] [INFO] [config.py:1000:print]   gradient_clipping ............ 1.0\n"
            "[2024-05-03 10:12:01,332] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.2\n"
            + "".join(f"[Rank 0] step={i * 10}, skipped=0, loss={v}\n" for i, v in enumerate(SPIKE, 1)))
MEGATRON_SPIKE = ("------------------------ arguments ------------------------\n  clip_grad ....................... 1.0\n"
                  + "".join(f" iteration {i * 10}/ 1000 | consumed samples: {i * 320} | lm loss: {v}E+00 |\n"
                            for i, v in enumerate(SPIKE, 1)))
FSDP_SPIKE = ('  File "/opt/conda/lib/python3.11/site-packages/torch/distributed/fsdp/fully_sharded_data_parallel.py",'
              ' line 890, in forward\n'
              + "".join(f"step {i * 10} | loss {v}\n" for i, v in enumerate(SPIKE, 1)))


def _changes(d):
    return [(c.kind, c.name, c.from_, c.to) for f in d.findings[:1] for s in f.steps for c in s.changes]


@pytest.mark.parametrize("log,framework,clip", [
    (HF_SPIKE, "hf_trainer", ("flag", "--max_grad_norm", 1.0, 0.5)),
    (LIGHTNING_SPIKE, "lightning", ("config", "Trainer(gradient_clip_val=…)", None, 0.5)),
    (DS_SPIKE, "deepspeed", ("config", "gradient_clipping", 1.0, 0.5)),
    (MEGATRON_SPIKE, "megatron", ("flag", "--clip-grad", 1.0, 0.5)),
    (FSDP_SPIKE, "fsdp", ("config", "model.clip_grad_norm_(max_norm=…)", None, 0.5)),
])
def test_clipping_is_named_as_the_job_names_it(run, log, framework, clip):
    d = run(log)
    assert d.job["framework"] == framework
    assert d.findings[0].symptom == "loss_spike"
    assert clip in _changes(d)
    foreign = {"--clip-grad", "gradient_clipping", "--max_grad_norm", "Trainer(gradient_clip_val=…)",
               "model.clip_grad_norm_(max_norm=…)"} - {clip[1]}
    assert not foreign & {c[1] for c in _changes(d)}


def test_hf_trainer_dump_values_drive_the_changes(run):
    ch = _changes(run(HF_SPIKE))
    assert ("flag", "--learning_rate", 2e-05, 1e-05) in ch
    assert ("flag", "--bf16", None, True) in ch            # it ran fp16=True
    assert not any(c[1].startswith("--lr") or c[1] == "--clip-grad" for c in ch)


def test_lightning_precision_is_its_own_literal(run):
    d = run(LIGHTNING_SPIKE + "fp16 ..... True\n")
    bf16 = [c for c in _changes(d) if c[1] == "Trainer(precision=…)"]
    assert bf16 == [("config", "Trainer(precision=…)", None, "bf16-mixed")]


OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB " \
      "of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use.\n"


def test_hf_oom_halves_the_batch_and_doubles_accumulation_in_hf_names(run):
    d = run(HF + OOM)
    ch = _changes(d)
    assert ("flag", "--per_device_train_batch_size", 8, 4) in ch
    assert ("flag", "--gradient_accumulation_steps", 2, 4) in ch
    assert ("flag", "--gradient_checkpointing", None, True) in ch
    assert ("flag", "--fsdp", None, "shard_grad_op") in ch
    assert not any(c[1].startswith("zero_optimization") or c[1].startswith("--micro") or c[1] == "--tensor-model-parallel-size"
                   for c in ch)


def test_megatron_oom_keeps_the_global_batch_by_itself(run):
    d = run("------------------------ arguments ------------------------\n"
            "  micro_batch_size ................ 4\n  use_distributed_optimizer ....... True\n"
            "  recompute_granularity ........... selective\n  tensor_model_parallel_size ...... 8\n" + OOM)
    steps = {s.id: s for s in d.findings[0].steps}
    assert ("flag", "--micro-batch-size", 4, 2) in _changes(d)
    assert "--global-batch-size" in steps["cuda_oom.halve_micro_batch"].text
    assert ("flag", "--recompute-granularity", "selective", "full") in _changes(d)
    # the distributed optimizer already shards optimizer state: no ZeRO or FSDP advice, no accumulation flag
    assert not any(c[1].startswith(("zero_optimization", "FSDP(", "--fsdp", "gradient_accumulation"))
                   for c in _changes(d))


def test_hf_on_deepspeed_shards_with_zero(run):
    d = run(HF.replace("_n_gpu=1,", "_n_gpu=1,\ndeepspeed=ds_z1.json,") +
            "[2024-05-03 10:12:01,332] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.2\n" + OOM)
    assert d.job["framework"] == "hf_trainer" and d.job["sharding_engine"] == "deepspeed"
    ch = _changes(d)
    assert ("config", "zero_optimization.stage", None, 2) in ch
    assert ("flag", "--per_device_train_batch_size", 8, 4) in ch


def test_unknown_framework_gets_megatron_names_with_the_others_in_a_note(run):
    d = run(OOM)
    assert "framework" not in d.job
    mb = next(c for s in d.findings[0].steps for c in s.changes if c.name == "--micro-batch-size")
    assert "framework not recognised" in mb.note and "HF Trainer: --per_device_train_batch_size" in mb.note


def test_one_change_once_per_answer(run):
    d = run("[INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.2\n"
            "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1\n"
            "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 1, reducing to 1\n"
            "Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.\n")
    keys = [(c[0], c[1], str(c[3])) for c in _changes(d)]
    assert d.findings[0].symptom == "loss_nan"
    assert len(keys) == len(set(keys))
    assert ("config", "bf16.enabled", "True") in keys


def test_unknown_framework_gets_no_accumulation_change_it_cannot_name(run):
    d = run("  micro_batch_size ........ 8\n" + OOM)
    names = [c[1] for c in _changes(d)]
    assert "--micro-batch-size" in names
    assert not any("accumulat" in n or n == "--global-batch-size" for n in names)
