"""The vocabulary of a job's settings as the log shows them: the keys under `job` in a diagnosis.

The context collector reads them (argument dumps, flags, DeepSpeed JSON), playbooks test and compute with them
(`job.micro_batch_size`), and the weekly report checks whether a recommended change was applied later. One list,
imported by all three."""
from __future__ import annotations

from typing import Any

# Settings read from argument dumps, flags and configs, with the type they are read as.
SETTINGS: dict[str, type] = {
    "micro_batch_size": int, "global_batch_size": int, "tensor_model_parallel_size": int,
    "pipeline_model_parallel_size": int, "virtual_pipeline_model_parallel_size": int, "num_layers": int,
    "num_layers_per_virtual_pipeline_stage": int, "recompute_granularity": str, "recompute_activations": bool,
    "checkpoint_activations": bool, "clip_grad": float, "lr": float, "lr_warmup_iters": int, "fp16": bool,
    "bf16": bool, "moe_aux_loss_coeff": float, "moe_expert_capacity_factor": float, "num_experts": int,
    "distributed_timeout_minutes": int, "zero_stage": int, "zero_optimization_stage": int, "initial_loss_scale": float,
    "data_parallel_size": int, "world_size": int, "layernorm_epsilon": float, "use_distributed_optimizer": bool,
    "train_micro_batch_size_per_gpu": int, "gradient_clipping": float, "initial_scale_power": int,
    "expert_model_parallel_size": int, "seq_length": int, "gradient_accumulation_steps": int, "hidden_size": int,
    # the HF Trainer's and Lightning's names
    "per_device_train_batch_size": int, "max_grad_norm": float, "learning_rate": float, "gradient_checkpointing": bool,
    "accumulate_grad_batches": int, "gradient_clip_val": float, "overlap_grad_reduce": bool,
    # DeepSpeed's engine configuration dump ("fp16_enabled ..... True", "initial_dynamic_scale .... 65536")
    "fp16_enabled": bool, "bfloat16_enabled": bool, "bf16_enabled": bool, "initial_dynamic_scale": float,
}
# Several spellings of one setting, stored under one key.
ALIASES = {"zero_optimization_stage": "zero_stage", "train_micro_batch_size_per_gpu": "micro_batch_size",
           "checkpoint_activations": "recompute_activations", "gradient_clipping": "clip_grad",
           "per_device_train_batch_size": "micro_batch_size", "max_grad_norm": "clip_grad", "learning_rate": "lr",
           "gradient_checkpointing": "recompute_activations", "accumulate_grad_batches": "gradient_accumulation_steps",
           "gradient_clip_val": "clip_grad", "fp16_enabled": "fp16", "bfloat16_enabled": "bf16", "bf16_enabled": "bf16"}

# Megatron-style flag (without the dashes) -> key
FLAG_TO_KEY = {
    "micro-batch-size": "micro_batch_size", "global-batch-size": "global_batch_size",
    "tensor-model-parallel-size": "tensor_model_parallel_size", "pipeline-model-parallel-size": "pipeline_model_parallel_size",
    "virtual-pipeline-model-parallel-size": "virtual_pipeline_model_parallel_size", "num-layers": "num_layers",
    "clip-grad": "clip_grad", "lr": "lr", "lr-warmup-iters": "lr_warmup_iters", "zero-stage": "zero_stage",
    "moe-aux-loss-coeff": "moe_aux_loss_coeff", "moe-expert-capacity-factor": "moe_expert_capacity_factor",
    "num-experts": "num_experts", "recompute-activations": "recompute_activations",
    "checkpoint-activations": "recompute_activations", "fp16": "fp16", "bf16": "bf16",
    "distributed-timeout-minutes": "distributed_timeout_minutes", "expert-model-parallel-size": "expert_model_parallel_size",
    "use-distributed-optimizer": "use_distributed_optimizer", "recompute-granularity": "recompute_granularity",
    "hidden-size": "hidden_size", "seq-length": "seq_length", "overlap-grad-reduce": "overlap_grad_reduce",
    "num-layers-per-virtual-pipeline-stage": "num_layers_per_virtual_pipeline_stage",
    # HF Trainer command lines
    "per_device_train_batch_size": "micro_batch_size", "gradient_accumulation_steps": "gradient_accumulation_steps",
    "max_grad_norm": "clip_grad", "learning_rate": "lr", "gradient_checkpointing": "recompute_activations",
}
# DeepSpeed config path -> key
CONFIG_TO_KEY = {"zero_optimization.stage": "zero_stage", "train_micro_batch_size_per_gpu": "micro_batch_size",
                 "gradient_clipping": "clip_grad", "gradient_accumulation_steps": "gradient_accumulation_steps"}

# Keys the engine adds beside the settings: environment variables seen, hosts, world size, instance family, and
# the parameter count; then the memory math derived from the parameter count.
ENV = "env"
CONTEXT_KEYS = (ENV, "hosts", "world_size", "instance_family", "parameters", "framework", "sharding_engine",
                "container")   # container: the log shows a container runtime (docker, enroot/pyxis, apptainer, k8s)
DERIVED_KEYS = ("model_state_gib_fp32_adam", "model_state_gib_mixed_adam", "min_gpus_80gb", "model_state_gib_12_bytes",
                "next_tensor_model_parallel_size", "next_pipeline_model_parallel_size",
                "next_virtual_pipeline_model_parallel_size", "min_micro_batches",   # core/layout.py
                "mem_states_gib", "mem_activations_gib", "mem_total_gib", "mem_saved_half_micro_gib",
                "mem_saved_next_tp_gib", "mem_saved_full_recompute_gib",
                "mem_saved_more_sharding_gib", "mem_saved_next_pp_gib",
                "mem_saved_zero3_offload_gib")   # core/plan.py, the job's own config
KEYS: frozenset[str] = frozenset(
    {ALIASES.get(k, k) for k in SETTINGS} | set(CONTEXT_KEYS) | set(DERIVED_KEYS))


def key_of_change(kind: str, name: str) -> str | None:
    """The job key a flag or config change sets, when the log can show it (None for anything else)."""
    if kind == "flag":
        return FLAG_TO_KEY.get(name.lstrip("-"))
    if kind == "config":
        return CONFIG_TO_KEY.get(name)
    return None


def coerce(kind: type, raw: str) -> Any:
    """A setting's text as the log printed it, read as its type (None when it cannot be)."""
    raw = raw.strip().rstrip(",")
    if kind is bool:
        if raw.lower() in ("true", "1", "yes"):
            return True
        if raw.lower() in ("false", "0", "no", "none"):
            return False
        return None
    if raw.lower() in ("none", "null"):
        return None
    try:
        return kind(float(raw)) if kind is int else kind(raw)
    except ValueError:
        return None
