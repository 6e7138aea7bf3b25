"""Fixes as a diff of the user's own file (issue 17): a DeepSpeed JSON, a Megatron launch script with bash arrays, an
HF/LLaMA-Factory YAML and an sbatch script; only the first step that has a change for the file is applied, values
already equal are left alone, missing keys are added in the file's style, and the rest is listed."""
import glob
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bot.patch.patch import patch
from conftest import FIXTURES, ROOT

CONF = FIXTURES / "configs"
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB "
       "of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use.\n")
DS_OOM = ("[2024-05-03 10:12:01,332] [INFO] [config.py:1000:print]   zero_optimization_stage ...... 1\n"
          "[2024-05-03 10:12:01,332] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.2\n" + OOM)
MEGATRON_OOM = ("------------------------ arguments ------------------------\n"
                "  micro_batch_size ................................ 4\n  num_layers ...................................... 36\n"
                + OOM)
HF_OOM = ("***** Running training *****\nTrainingArguments(\n_n_gpu=1,\ngradient_accumulation_steps=2,\n"
          "per_device_train_batch_size=8,\n)\n" + OOM)


def _minus_plus(diff: str) -> list[str]:
    return [x for x in diff.splitlines() if x[:1] in "-+" and not x.startswith(("---", "+++"))]


def test_deepspeed_json_is_edited_in_place(run):
    text = (CONF / "ds_config_zero1.json").read_text().replace('"train_micro_batch_size_per_gpu": "auto"',
                                                                '"train_micro_batch_size_per_gpu": 8')
    log = DS_OOM.replace("zero_optimization_stage ...... 1", "train_micro_batch_size_per_gpu  8")
    p = patch(run(log), "ds_config_zero1.json", text)
    assert p.step == "cuda_oom.halve_micro_batch"
    assert _minus_plus(p.diff) == ['-  "train_micro_batch_size_per_gpu": 8,', '+  "train_micro_batch_size_per_gpu": 4,']
    assert p.diff.startswith("--- a/ds_config_zero1.json\n+++ b/ds_config_zero1.json\n")
    assert any(x.startswith("cuda_oom.halve_micro_batch: config gradient_accumulation_steps") for x in p.not_applied)


def test_megatron_script_changes_the_flag_and_adds_one_in_the_array(run):
    text = (CONF / "train_gpt_megatron.sh").read_text()
    p = patch(run(MEGATRON_OOM), "train_gpt_megatron.sh", text)
    assert _minus_plus(p.diff) == ["-    --micro-batch-size 4 ", "+    --micro-batch-size 2 "]
    assert any("--recompute-activations" in x for x in p.not_applied)   # the next rung, not stacked
    from core.models import Change
    from bot.patch.patch import _script
    added = _script(text, Change(kind="flag", name="--recompute-activations", to=True))
    assert "    --bf16\n    --recompute-activations\n)" in added


def test_hf_yaml_keeps_the_global_batch(run):
    text = (CONF / "llama3_lora_sft.yaml").read_text()
    p = patch(run(HF_OOM), "llama3_lora_sft.yaml", text)
    assert _minus_plus(p.diff) == ["-per_device_train_batch_size: 8", "-gradient_accumulation_steps: 2",
                                   "+per_device_train_batch_size: 4", "+gradient_accumulation_steps: 4"]


def test_a_missing_key_is_added_and_an_equal_value_left_alone(run):
    text = json.dumps({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}, indent=2) + "\n"
    spike = ("[INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.2\n"
             + "".join(f"[Rank 0] step={i * 10}, skipped=0, loss={v}\n"
                       for i, v in enumerate([1.44, 1.43, 1.42, 1.41, 7.9], 1)))
    p = patch(run(spike), "ds.json", text)
    assert p.step == "loss.clip" and '+  "gradient_clipping": 0.5' in p.diff
    script = (CONF / "train_gpt_megatron.sh").read_text().replace("--micro-batch-size 4", "--micro-batch-size 2")
    same = patch(run(MEGATRON_OOM), "train.sh", script)   # the file already has the halved value
    assert same.diff == "" and "--micro-batch-size = 2 (already so)" in same.not_applied


def test_sbatch_env_lines(run):
    text = "#!/bin/bash\n#SBATCH --nodes=2\nexport NCCL_DEBUG=WARN\nexport FI_EFA_FORK_SAFE=1\nsrun python train.py\n"
    from core.models import Change
    from bot.patch.patch import _script
    assert "export NCCL_DEBUG=INFO\n" in _script(text, Change(kind="env", name="NCCL_DEBUG", to="INFO"))
    assert "FI_EFA_FORK_SAFE" not in _script(text, Change(kind="env", name="FI_EFA_FORK_SAFE", to=None))
    added = _script(text, Change(kind="env", name="FI_EFA_USE_HUGE_PAGE", to=0))
    assert "export FI_EFA_FORK_SAFE=1\nexport FI_EFA_USE_HUGE_PAGE=0\nsrun" in added


def test_cli_prints_the_diff_and_refuses_a_broken_config(tmp_path):
    log = tmp_path / "oom.log"
    log.write_text(MEGATRON_OOM)
    cmd = [sys.executable, "-m", "bot.cli", "diagnose", "--config", str(CONF / "train_gpt_megatron.sh"), str(log)]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0 and "+    --micro-batch-size 2 " in out.stdout
    js = subprocess.run(cmd[:4] + ["--json"] + cmd[4:], cwd=ROOT, capture_output=True, text=True)
    assert "+    --micro-batch-size 2 " in json.loads(js.stdout.splitlines()[0])["diff"]
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    err = subprocess.run(cmd[:5] + [str(bad), str(log)], cwd=ROOT, capture_output=True, text=True)
    assert err.returncode == 2 and err.stderr.count("\n") == 1 and "Traceback" not in err.stderr


# Round trips over config files shaped like the public ones users attach (HF-docs ZeRO-3 JSON with "auto" values,
# an `accelerate config` YAML, a LLaMA-Factory YAML pointing at a DeepSpeed JSON, an HF run_clm torchrun script,
# a Megatron sbatch script with EFA exports), against every OOM, NaN, spike, fallback and timeout fixture.
LOGS = sorted(p for sym in ("cuda_oom", "loss_spike", "loss_nan", "tcp_fallback", "nccl_timeout")
              for p in glob.glob(str(FIXTURES / sym / "*.log")))


def _parses(name: str, text: str) -> None:
    if name.endswith(".json"):
        json.loads(text)
    elif name.endswith((".yaml", ".yml")):
        yaml.safe_load(text)
    else:
        out = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True)
        assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("config", sorted(p.name for p in CONF.iterdir()))
def test_every_patch_round_trips(run, config):
    """The patched file still parses, patching it again changes nothing, and nothing from another tool's
    vocabulary goes in: no Megatron flag into an HF script, no DeepSpeed key into an accelerate or Trainer YAML
    outside what that tool reads, no prose as a key, no env var or docker option into a config."""
    text = (CONF / config).read_text()
    hf_script = "run_clm" in config
    for log in LOGS:
        d = run(Path(log).read_text(errors="replace"))
        p = patch(d, config, text)
        if not p.diff:
            continue
        patched = _apply(text, p.diff)
        _parses(config, patched)
        assert patch(d, config, patched).diff == "", (log, config)
        added = [x[1:] for x in _minus_plus(p.diff) if x.startswith("+")]
        for line in added:
            if config.endswith(".sh"):
                flags = re.findall(r"(?<!\S)--[\w-]+", line)
                assert all(("_" in f) == hf_script for f in flags if f != "--deepspeed"), (log, line)
            else:
                assert "export " not in line and "--" not in line and " " not in line.split(":")[0].strip(), (log, line)
        if config.startswith("accelerate"):
            assert all(a.startswith("deepspeed_config.") for a in p.applied), (log, p.applied)


def _apply(text: str, diff: str) -> str:
    """Apply a unified diff produced by patch() to the original text (difflib hunks, in order)."""
    src, out, i = text.splitlines(keepends=True), [], 0
    for line in diff.splitlines(keepends=True)[2:]:
        m = re.match(r"@@ -(\d+)(?:,(\d+))?", line)
        if m:
            start = int(m.group(1)) - (0 if m.group(2) == "0" else 1)
            out.extend(src[i:start])
            i = start
        elif line.startswith(" "):
            out.append(src[i])
            i += 1
        elif line.startswith("-"):
            i += 1
        elif line.startswith("+"):
            out.append(line[1:])
    return "".join(out + src[i:])


def test_an_auto_value_is_left_to_the_hf_trainer(run):
    p = patch(run(DS_OOM.replace("zero_optimization_stage ...... 1", "train_micro_batch_size_per_gpu  8")),
              "ds_config_zero3_auto.json", (CONF / "ds_config_zero3_auto.json").read_text())
    assert '"train_micro_batch_size_per_gpu": "auto"' not in "".join(_minus_plus(p.diff))
    assert any('"auto" here: the HF Trainer fills it from --per_device_train_batch_size' in x for x in p.not_applied)


def test_accelerate_yaml_gets_its_own_deepspeed_keys(run):
    text = (CONF / "accelerate_deepspeed_zero2.yaml").read_text()
    p = patch(run(OOM), "accelerate_deepspeed_zero2.yaml", text)
    assert p.step == "cuda_oom.zero3_offload"
    assert sorted(_minus_plus(p.diff)) == ["+  offload_optimizer_device: cpu", "+  zero_stage: 3",
                                           "-  offload_optimizer_device: none", "-  zero_stage: 2"]


def test_a_megatron_flag_is_renamed_for_an_hf_script_and_a_docker_option_needs_docker_run(run):
    from core.models import Change
    from bot.patch.target import reader_of, skip_reason, translate
    script = (CONF / "run_clm_torchrun.sh").read_text()
    assert reader_of("script", script) == "hf_trainer"
    assert translate(Change(kind="flag", name="--clip-grad", to=0.5), "hf_trainer").name == "--max_grad_norm"
    assert "a Megatron flag" in skip_reason(Change(kind="flag", name="--recompute-granularity", to="full"),
                                            "script", "hf_trainer", script)
    ulimit = Change(kind="flag", name="--ulimit", to="memlock=-1")
    assert "no docker run here" in skip_reason(ulimit, "script", "hf_trainer", script)
    assert skip_reason(ulimit, "script", None, "docker run --gpus all --shm-size 1g img python t.py\n") is None


def test_a_file_that_disagrees_with_the_log_is_not_edited_and_zero_is_never_lowered(run):
    from core.models import Change
    from bot.patch.target import skip_reason
    sbatch = (CONF / "sbatch_megatron_efa.sh").read_text()   # --micro-batch-size 2
    why = skip_reason(Change(kind="flag", name="--micro-batch-size", to=4, from_=8), "script", "megatron", sbatch)
    assert why.startswith("this file has 2, the log showed 8")
    zero3 = (CONF / "ds_config_zero3_auto.json").read_text()
    assert "already shards at stage 3" in skip_reason(Change(kind="config", name="zero_optimization.stage", to=2),
                                                      "json", "deepspeed", zero3)
    prose = Change(kind="config", name="the model config's norm epsilon", to=1e-5)
    assert skip_reason(prose, "json", "deepspeed", zero3) == "not a key in this file"
