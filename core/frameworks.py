"""Training frameworks: how a log shows which one ran, and each one's own name for a setting the playbooks change.

A playbook names a setting by concept (`{kind: setting, name: clip_grad}`); the engine turns it into the job's own
vocabulary — Megatron's `--clip-grad`, DeepSpeed's `gradient_clipping`, the HF Trainer's `--max_grad_norm`,
Lightning's `gradient_clip_val`, FSDP's `model.clip_grad_norm_` — so the user copies a change that exists in their
framework. One table, read by the framework collector, the playbook check and the engine."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

MEGATRON, DEEPSPEED, HF, LIGHTNING, FSDP = "megatron", "deepspeed", "hf_trainer", "lightning", "fsdp"
TORCH = "torch"   # plain PyTorch: never detected (every framework prints torch), the spelling an unrecognised job gets
# When several show (Megatron-DeepSpeed, the HF Trainer or Lightning driving DeepSpeed or FSDP), the settings a
# user edits belong to the first of these; the sharding engine underneath still decides the sharding vocabulary.
PRIMARY_ORDER = (MEGATRON, HF, LIGHTNING, DEEPSPEED, FSDP)
SHARDING_ORDER = (DEEPSPEED, FSDP, MEGATRON)
LABELS = {MEGATRON: "Megatron", DEEPSPEED: "DeepSpeed", HF: "HF Trainer", LIGHTNING: "Lightning", FSDP: "FSDP",
          TORCH: "plain torch"}
# Settings DeepSpeed's engine owns whenever it runs the optimizer, whichever framework launched it: Megatron-DeepSpeed
# reads clipping and precision from the DeepSpeed JSON (not --clip-grad / --fp16), and the HF Trainer only fills the
# JSON's "auto" values from its own flags.
DS_OWNED = frozenset({"clip_grad", "bf16"})

# Raw names a playbook may use outside the concept table, and who owns them: a change naming one is never given to a
# job that shows another framework (no DeepSpeed JSON key for a Megatron or HF job, no Megatron flag for a DeepSpeed
# one). A job whose framework the log does not show keeps
# them: the name says whose it is, and `--config` translates it into the user's file.
CONTAINER = "container"   # job.container: the container runtime the log shows (docker options only for docker)
_DEEPSPEED_KEYS = ("zero_optimization.", "fp16.", "bf16.", "gradient_clipping", "train_micro_batch_size_per_gpu",
                   "activation_checkpointing.")
_MEGATRON_FLAGS = frozenset({
    "--DDP-impl", "--distributed-timeout-minutes", "--initial-loss-scale", "--log-straggler", "--lr-warmup-iters",
    "--moe-aux-loss-coeff", "--moe-expert-capacity-factor", "--overlap-grad-reduce", "--pipeline-model-parallel-size",
    "--rampup-batch-size", "--recompute-granularity", "--recompute-method", "--recompute-num-layers",
    "--straggler-minmax-count", "--tensor-model-parallel-size", "--use-distributed-optimizer",
    "--virtual-pipeline-model-parallel-size", "--optimizer-cpu-offload", "--use-precision-aware-optimizer"})
# Literal text of a container runtime in a log (a launcher line, an image, a runtime's own message) -> the runtime.
# Not a bare "docker": the host's docker0 bridge shows in NCCL's interface lines on hosts that run no container.
CONTAINER_SIGNS = {"docker run": "docker", "docker exec": "docker", "/.dockerenv": "docker", "podman": "docker",
                   "enroot": "enroot", "pyxis": "enroot", "apptainer": "apptainer", "Apptainer": "apptainer",
                   "singularity": "apptainer", "Singularity": "apptainer", "kubernetes": "kubernetes",
                   "kubectl": "kubernetes", "containerd": "kubernetes"}


def owner_of(kind: str, name: str) -> str | None:
    """Who owns a raw change name (DeepSpeed or Megatron), or None for a name any job has."""
    if kind == "config" and name.startswith(_DEEPSPEED_KEYS):
        return DEEPSPEED
    if kind == "flag" and name in _MEGATRON_FLAGS:
        return MEGATRON
    return None


def shows(job: dict, owner: str) -> bool:
    """Whether a raw name's owner may be this job's framework: yes unless the log shows another one."""
    return job.get("framework") is None or owner in (job.get("framework"), job.get("sharding_engine"))

# Literal text only that framework prints (paths of its modules, banners, its own log prefixes). Per-step lines
# ("lm loss:", "[Rank 0] step=") are left out on purpose: they would wake the collector on every line of a long log.
SIGNATURES: dict[str, tuple[str, ...]] = {
    MEGATRON: ("megatron/", "megatron.core", "Megatron-LM", "> building GPT model",
               "arguments ------------------------", "number of parameters on (tensor, pipeline)",   # its banner
               # its argument dump without the banner: keys only Megatron-style trainers print (no literal may overlap
               # another reader's trigger: the pure-Python scanner finds non-overlapping literals only)
               "tensor_model_parallel_size", "lr_warmup_iters"),
    DEEPSPEED: ("deepspeed/", "[deepspeed]", "DeepSpeed info: version", "DeepSpeedEngine", "ds_config",
                "zero_optimization", "DeepSpeed Flops Profiler", "CONFIG: micro_batches="),   # the last: its pipeline engine
    HF: ("transformers/trainer.py", "***** Running training *****", "TrainingArguments(", "per_device_train_batch_size"),
    LIGHTNING: ("lightning/pytorch/", "pytorch_lightning/", "lightning.pytorch", "lightning_fabric", "`Trainer.fit`",
                "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES", "Automatic Mixed Precision (AMP)"),
    FSDP: ("torch/distributed/fsdp/", "FullyShardedDataParallel", "ShardingStrategy.", "fully_shard("),
}


@dataclass(frozen=True)
class Name:
    kind: str                                # "flag" or "config"
    name: str
    value: Callable[[Any], Any] | None = None   # the framework's literal for a generic value (bf16 True -> "bf16-mixed")
    note: str | None = None
    # (kind, name, job key, value): a setting that must go when this one is set (Megatron asserts on --bf16 beside
    # --fp16); a flag is removed (value None, DESIGN's removal), a config key set to the value
    drop: tuple[str, str, str, Any] | None = None
    note_ko: str | None = None


# concept -> framework -> its name. A framework missing from a concept has no such setting: the engine says so.
VOCAB: dict[str, dict[str, Name]] = {
    "micro_batch_size": {
        MEGATRON: Name("flag", "--micro-batch-size"),
        DEEPSPEED: Name("config", "train_micro_batch_size_per_gpu"),
        HF: Name("flag", "--per_device_train_batch_size"),
        LIGHTNING: Name("config", "DataLoader(batch_size=…)", note="the batch size your DataModule gives the DataLoader",
                        note_ko="DataModule이 DataLoader에 주는 배치 크기"),
        FSDP: Name("config", "DataLoader(batch_size=…)", note="the per-rank batch size", note_ko="rank당 배치 크기"),
    },
    "gradient_accumulation_steps": {   # Megatron has none: it derives the micro-batches per step from --global-batch-size
        DEEPSPEED: Name("config", "gradient_accumulation_steps"),
        HF: Name("flag", "--gradient_accumulation_steps"),
        LIGHTNING: Name("config", "Trainer(accumulate_grad_batches=…)"),
        FSDP: Name("config", "gradient accumulation steps", note="in your training loop (no_sync() on the inner steps)",
                   note_ko="학습 루프에서(안쪽 스텝은 no_sync())"),
    },
    "global_batch_size": {   # the batch one optimizer step sees, across all data-parallel ranks
        MEGATRON: Name("flag", "--global-batch-size"),
        DEEPSPEED: Name("config", "train_batch_size"),
    },
    "virtual_pipeline_model_parallel_size": {   # interleaved pipeline stages: Megatron's alone here
        MEGATRON: Name("flag", "--virtual-pipeline-model-parallel-size"),
    },
    "clip_grad": {
        MEGATRON: Name("flag", "--clip-grad"),
        DEEPSPEED: Name("config", "gradient_clipping"),
        HF: Name("flag", "--max_grad_norm"),
        LIGHTNING: Name("config", "Trainer(gradient_clip_val=…)"),
        FSDP: Name("config", "model.clip_grad_norm_(max_norm=…)", note="FSDP's own method, not torch.nn.utils'", note_ko="torch.nn.utils의 것이 아닌 FSDP 자체 메서드"),
    },
    "bf16": {
        MEGATRON: Name("flag", "--bf16", drop=("flag", "--fp16", "fp16", None)),
        DEEPSPEED: Name("config", "bf16.enabled", drop=("config", "fp16.enabled", "fp16", False)),
        HF: Name("flag", "--bf16", drop=("flag", "--fp16", "fp16", None)),
        LIGHTNING: Name("config", "Trainer(precision=…)", value=lambda v: "bf16-mixed" if v is True else v),
        FSDP: Name("config", "MixedPrecision(param_dtype=…)", value=lambda v: "torch.bfloat16" if v is True else v),
    },
    "recompute_activations": {
        MEGATRON: Name("flag", "--recompute-activations"),
        DEEPSPEED: Name("config", "activation_checkpointing.partition_activations",
                        note="with deepspeed.checkpointing.checkpoint around the layers",
                        note_ko="레이어를 deepspeed.checkpointing.checkpoint로 감싸서"),
        HF: Name("flag", "--gradient_checkpointing"),
        LIGHTNING: Name("config", "FSDPStrategy(activation_checkpointing_policy=…)",
                        value=lambda v: "{your transformer block class}" if v is True else v),
        FSDP: Name("config", "apply_activation_checkpointing(model, …)",
                   value=lambda v: "check_fn=<your transformer block>" if v is True else v),
    },
    "lr": {
        MEGATRON: Name("flag", "--lr"),
        DEEPSPEED: Name("config", "optimizer.params.lr"),
        HF: Name("flag", "--learning_rate"),
        LIGHTNING: Name("config", "the lr in configure_optimizers()"),
        FSDP: Name("config", "optimizer lr"),
    },
    "distributed_timeout": {   # minutes, converted where a framework counts in seconds or takes a timedelta
        MEGATRON: Name("flag", "--distributed-timeout-minutes"),
        HF: Name("flag", "--ddp_timeout", value=lambda v: int(v * 60) if isinstance(v, (int, float)) else v,
                 note="seconds", note_ko="초 단위"),
        DEEPSPEED: Name("config", "deepspeed.init_distributed(timeout=…)", value=lambda v: _minutes(v)),
        LIGHTNING: Name("config", "Trainer(strategy=DDPStrategy(timeout=…))", value=lambda v: _minutes(v),
                        note="FSDPStrategy and DeepSpeedStrategy take the same timeout=",
                        note_ko="FSDPStrategy와 DeepSpeedStrategy도 같은 timeout=을 받습니다"),
        FSDP: Name("config", "dist.init_process_group(timeout=…)", value=lambda v: _minutes(v)),
        TORCH: Name("config", "dist.init_process_group(timeout=…)", value=lambda v: _minutes(v)),
    },
    "shard_optimizer": {   # shard optimizer state (and gradients where the engine can) across data-parallel ranks
        DEEPSPEED: Name("config", "zero_optimization.stage", value=lambda v: 2 if v is True else v),
        FSDP: Name("config", "FSDP(model, sharding_strategy=…)",
                   value=lambda v: "ShardingStrategy.SHARD_GRAD_OP" if v is True else v),
        MEGATRON: Name("flag", "--use-distributed-optimizer"),
        HF: Name("flag", "--fsdp", value=lambda v: "shard_grad_op" if v is True else v),
        LIGHTNING: Name("config", "Trainer(strategy=…)", value=lambda v: "deepspeed_stage_2" if v is True else v),
    },
}


def _minutes(v: Any) -> Any:
    return f"timedelta(minutes={v:g})" if isinstance(v, (int, float)) else v


def detect(seen: set[str]) -> tuple[str | None, str | None]:
    """(the framework whose settings the user edits, the one that shards) from the frameworks seen in the log."""
    primary = next((f for f in PRIMARY_ORDER if f in seen), None)
    sharding = next((f for f in SHARDING_ORDER if f in seen), None)
    return primary, sharding


_KO = {"not recognised": "로그에서 프레임워크를 알아보지 못함", "drop": "설정돼 있다면 {name}도 빼세요",
       "megatron_ds": "DeepSpeed JSON에서: 엔진이 {name}이 아니라 이 값을 씁니다",
       "hf_ds": "DeepSpeed JSON에서: {name}도 같게 맞추거나 JSON을 \"auto\"로 두세요", "ds": "DeepSpeed JSON에서"}
_EN = {"not recognised": "framework not recognised in the log", "drop": "and drop {name} if it is set",
       "megatron_ds": "the DeepSpeed JSON: its engine applies this, not {name}",
       "hf_ds": "the DeepSpeed JSON; keep {name} in step or leave the JSON at \"auto\"", "ds": "the DeepSpeed JSON"}


def phrase(key: str, lang: str = "en", **kw: str) -> str:
    """A note the engine composes (framework not shown, a setting to drop), in the answer's language."""
    return (_KO if lang == "ko" else _EN)[key].format(**kw)


def name_for(concept: str, primary: str | None, sharding: str | None, lang: str = "en") -> Name | None:
    """The job's own name for a concept, or None when its framework has no such setting. Sharding follows the engine
    that shards (an HF Trainer job on DeepSpeed shards with ZeRO); everything else follows the primary framework.
    An unrecognised framework gets plain torch's name where there is one (else Megatron's), every other in the note.
    Notes come in the answer's language (`note_ko` in Korean)."""
    table = VOCAB[concept]
    fw = (sharding or primary) if concept == "shard_optimizer" else primary

    def own_note(n: Name) -> str | None:
        return n.note_ko if lang == "ko" and n.note_ko else n.note
    if sharding == DEEPSPEED and concept in DS_OWNED and fw in (MEGATRON, HF):
        ds = table[DEEPSPEED]
        why = phrase("megatron_ds" if fw == MEGATRON else "hf_ds", lang, name=table[fw].name)
        return Name(ds.kind, ds.name, ds.value, "; ".join(x for x in (own_note(ds), why) if x), ds.drop)
    if fw is None:
        key = TORCH if TORCH in table else MEGATRON if MEGATRON in table else next(iter(table))
        base = table[key]
        others = "; ".join(f"{LABELS[f]}: {n.name}" for f, n in table.items() if f != key and n.name != base.name)
        return Name(base.kind, base.name, base.value,
                    "; ".join(x for x in (phrase("not recognised", lang), others) if x), base.drop)
    n = table.get(fw)
    return None if n is None else Name(n.kind, n.name, n.value, own_note(n), n.drop)
