"""Where a diagnosis's change goes in the user's file, or why it does not (issue 17).

The file says which tool reads it: a DeepSpeed JSON, an HF Trainer / LLaMA-Factory argument file (JSON or YAML), an
`accelerate config` YAML, a Megatron or HF launch script, a `docker run` line. A change named in another framework's
vocabulary is renamed into the file's (`--clip-grad` → `--max_grad_norm` in an HF script, `gradient_clipping` in a
DeepSpeed JSON, `deepspeed_config.gradient_clipping` in an accelerate YAML) through the same table the engine uses
(core/frameworks.py). A key or flag the file already has is edited; a missing one is added only to a file of the
tool that reads it. A DeepSpeed value the HF Trainer fills in (`"auto"`) is left alone: the Trainer's own argument
is the one to change. Everything else is listed with the reason."""
from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from core import frameworks as F
from core.models import Change

ACCELERATE = "accelerate"
DOCKER_FLAGS = ("--ulimit", "--shm-size", "--device", "--ipc", "--privileged", "--gpus")
# DeepSpeed key -> the `accelerate config` YAML key that sets it (others need a deepspeed_config_file)
ACCELERATE_KEYS = {"zero_optimization.stage": "deepspeed_config.zero_stage",
                   "gradient_clipping": "deepspeed_config.gradient_clipping",
                   "gradient_accumulation_steps": "deepspeed_config.gradient_accumulation_steps",
                   "zero_optimization.offload_optimizer.device": "deepspeed_config.offload_optimizer_device",
                   "zero_optimization.offload_param.device": "deepspeed_config.offload_param_device"}
# DeepSpeed key -> the HF Trainer argument that fills it when the JSON says "auto"
AUTO_FROM = {"train_micro_batch_size_per_gpu": "--per_device_train_batch_size",
             "gradient_accumulation_steps": "--gradient_accumulation_steps", "gradient_clipping": "--max_grad_norm",
             "bf16.enabled": "--bf16", "fp16.enabled": "--fp16", "optimizer.params.lr": "--learning_rate",
             "activation_checkpointing.partition_activations": "--gradient_checkpointing"}
KEY_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
# (kind, name) -> concept, for renaming a change into the file's framework; values carry over only where the
# framework's name takes the same literal (no value function)
CONCEPT = {(n.kind, n.name): concept for concept, by in F.VOCAB.items() for n in by.values() if n.value is None}


def kind_of(name: str, text: str) -> str:
    suffix = Path(name).suffix.lower()
    if suffix == ".json" or text.lstrip().startswith("{"):
        return "json"
    return "yaml" if suffix in (".yaml", ".yml") else "script"


def reader_of(kind: str, text: str) -> str | None:
    """The tool that reads this file, from what it holds; None when nothing says."""
    trainer = re.search(r"per_device_\w+|model_name_or_path", text)
    if kind == "script":
        if re.search(r"pretrain_\w+\.py|megatron|--micro-batch-size|--tensor-model-parallel-size", text, re.I):
            return F.MEGATRON
        return F.HF if trainer else None
    if kind == "yaml" and re.search(r"^(distributed_type|compute_environment):", text, re.M):
        return ACCELERATE
    if trainer:
        return F.HF
    if kind == "json" and re.search(r'"(zero_optimization|train_micro_batch_size_per_gpu|train_batch_size)"', text):
        return F.DEEPSPEED
    return None


def translate(c: Change, reader: str | None) -> Change:
    """The change under the file's own name (the same change when the file's framework has no such setting)."""
    concept = CONCEPT.get((c.kind, c.name))
    fw = F.DEEPSPEED if reader == ACCELERATE else reader
    target = F.VOCAB[concept].get(fw) if concept and fw else None
    out = c if target is None or target.value is not None else replace(c, kind=target.kind, name=target.name)
    if reader == ACCELERATE and out.kind == "config" and out.name in ACCELERATE_KEYS:
        out = replace(out, name=ACCELERATE_KEYS[out.name])
    return out


def _value_at(doc, path: list[str]):
    for key in path:
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


def _flag_present(name: str, text: str) -> bool:
    return re.search(rf"(?<!\S){re.escape(name)}(?=[\s=]|$)", text) is not None


def current(c: Change, kind: str, text: str):
    """The value the file holds now for this change (None when it does not hold one)."""
    if kind == "script":
        pat = (rf"^\s*export\s+{re.escape(c.name)}=(\S+)" if c.kind == "env"
               else rf"(?<!\S){re.escape(c.name)}(?:=|[ \t]+)(?!--)([^\s\\]+)")
        m = re.search(pat, text, re.M)
        return m.group(1).strip("'\"") if m else None
    return _value_at(_load(kind, text), (c.name.lstrip("-") if c.kind == "flag" else c.name).split("."))


def _load(kind: str, text: str):
    """The parsed JSON or YAML document; None when it does not parse."""
    import yaml
    try:
        return json.loads(text) if kind == "json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError):
        return None


def _same(a, b) -> bool:
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a).lower() == str(b).lower()


def _conflict(c: Change, now) -> str | None:
    """A file that holds another value (`now`) than the log showed is not the config this job ran with; a ZeRO
    stage is never lowered."""
    if now is None or now == "auto":
        return None
    if c.from_ is not None and not _same(now, c.from_) and not _same(now, c.to):
        return f"this file has {now}, the log showed {c.from_}: is it the config this job ran with?"
    if c.name in ("zero_optimization.stage", "deepspeed_config.zero_stage", "--zero-stage") and \
            isinstance(c.to, int) and str(now).isdigit() and int(now) > c.to:
        return f"this file already shards at stage {now}"
    return None


def skip_reason(c: Change, kind: str, reader: str | None, text: str) -> str | None:
    """None when the change goes into this file; otherwise why not, in a few words."""
    if c.kind == "flag" and c.to is None and c.from_ is not None:   # a removal (DESIGN: `to: null`)
        if kind != "script":
            return "a launch flag, not a key in this file"
        return None if _flag_present(c.name, text) else "not in this script: nothing to remove"
    if c.kind == "command" or (c.to is None and c.kind != "env"):
        return "not a setting"
    now = current(c, kind, text)   # what the file holds for this change (the file is parsed once per change)
    conflict = _conflict(c, now)
    if conflict:
        return conflict
    if kind == "script":
        if c.kind == "env" or (c.kind == "flag" and _flag_present(c.name, text)):
            return None
        if c.kind != "flag":
            return "a config file setting, not a launch flag"
        family = "docker" if c.name in DOCKER_FLAGS else F.HF if "_" in c.name else F.MEGATRON
        if family == "docker":
            return None if re.search(r"\bdocker run\b", text) else "a `docker run` option: no docker run here"
        return None if family == reader else f"a {F.LABELS[family]} flag: this script runs {F.LABELS.get(reader, 'something else')}"
    if c.kind == "env":
        return "an environment variable: it goes in the launch script"
    key = c.name.lstrip("-") if c.kind == "flag" else c.name
    if not KEY_PATH.fullmatch(key):
        return "not a key in this file"
    if reader == F.HF:
        return None if c.kind == "flag" and "_" in c.name else "a DeepSpeed setting: it belongs in the DeepSpeed JSON"
    if c.kind != "config":
        return "a launch flag, not a key in this file"
    if reader == ACCELERATE:
        return None if key.startswith("deepspeed_config.") else "accelerate sets only a few DeepSpeed keys: use a deepspeed_config_file"
    if kind == "json" and now == "auto":
        return f"\"auto\" here: the HF Trainer fills it from {AUTO_FROM.get(key, 'its own arguments')}"
    if kind == "json" and now is None and key in AUTO_FROM and '"auto"' in text:
        return f"the HF Trainer drives this file (\"auto\" values): set {AUTO_FROM[key]} in its arguments"
    return None if now is not None or (kind == "json" and reader == F.DEEPSPEED) else "not a key in this file"
