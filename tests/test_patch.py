"""Fixes as a diff of the user's own file (issue 17): a DeepSpeed JSON, a Megatron launch script with bash arrays, an
HF/LLaMA-Factory YAML and an sbatch script; only the first step that has a change for the file is applied, values
already equal are left alone, missing keys are added in the file's style, and the rest is listed."""
import json
import subprocess
import sys

from bot.patch import patch
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
    from bot.patch import _script
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
    from bot.patch import _script
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
