"""The shape of an answer (issue 30): changes printed in the form they are pasted (a flag with its value, a DeepSpeed
key as JSON, a Python call with the value in place, the current value after a `#`), the root cause's first four steps
numbered, later rungs after them, environment clean-up in its own block last, and the engine's facts only with
--verbose (the JSON keeps them)."""
import json

import pytest

from bot.answer.render import change_text, diagnosis_text
from core.models import Change

from test_advice_vocabulary import COLLAPSE, DS, DS_DUMP, HF, TCP, TCP_DOCKER0


@pytest.mark.parametrize("change,text", [
    (Change(kind="flag", name="--clip-grad", to=0.5, from_=1.0), "--clip-grad 0.5   # was 1.0"),
    (Change(kind="flag", name="--bf16", to=True), "--bf16"),
    (Change(kind="flag", name="--fp16", to=None, from_=True, note="remove it"), "remove --fp16"),
    (Change(kind="config", name="gradient_clipping", to=0.5, from_=1.0), '"gradient_clipping": 0.5   # was 1.0'),
    (Change(kind="config", name="fp16.initial_scale_power", to=12, from_=16),
     '"fp16": {"initial_scale_power": 12}   # was 16'),
    (Change(kind="config", name="bf16.enabled", to=True), '"bf16": {"enabled": true}'),
    (Change(kind="config", name="Trainer(gradient_clip_val=…)", to=0.5), "Trainer(gradient_clip_val=0.5)"),
    (Change(kind="config", name="Trainer(precision=…)", to="bf16-mixed"), 'Trainer(precision="bf16-mixed")'),
    (Change(kind="config", name="MixedPrecision(param_dtype=…)", to="torch.bfloat16"),
     "MixedPrecision(param_dtype=torch.bfloat16)"),
    (Change(kind="config", name="dist.init_process_group(timeout=…)", to="timedelta(minutes=30)",
            from_="timedelta(minutes=10)"),
     "dist.init_process_group(timeout=timedelta(minutes=30))   # was timedelta(minutes=10)"),
    (Change(kind="env", name="NCCL_DEBUG", to="INFO"), "export NCCL_DEBUG=INFO"),
    (Change(kind="env", name="RDMAV_FORK_SAFE", from_="1", note="remove it"), "unset RDMAV_FORK_SAFE   # was 1"),
    (Change(kind="command", name="fi_info -p efa"), "$ fi_info -p efa"),
])
def test_a_change_prints_as_it_is_pasted(change, text):
    assert change_text(change) == text


def test_the_current_value_is_said_in_korean_too():
    assert change_text(Change(kind="flag", name="--lr", to=1e-4, from_=2e-4), "ko") == "--lr 0.0001   # 현재 0.0002"


def _blocks(text: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.startswith("  ") and not ln.startswith("   ")]


def test_four_root_steps_then_the_next_rungs_then_clean_up_last(run):
    d = run(TCP_DOCKER0 + "h1:7:7 [0] NCCL INFO RDMAV_FORK_SAFE set by environment to 1\n")
    text = diagnosis_text(d)
    heads = _blocks(text)
    assert heads[-3:] == ["steps:", "if those are not enough:", "also clean up and check:"]
    numbered = [ln.strip().split(".")[0] for ln in text.splitlines() if ln[:6].strip()[:1].isdigit()]
    assert numbered[:4] == ["1", "2", "3", "4"]
    after = text.split("also clean up and check:")[1]
    assert "Also clean up" not in after and "RDMAV_FORK_SAFE" in after and "NCCL_SOCKET_IFNAME" in after
    assert "RDMAV_FORK_SAFE" not in text.split("also clean up and check:")[0].split("evidence:")[1].split("steps:")[1]
    cleanup = [s for s in d.findings[0].steps if s.cleanup]
    doc = d.to_json_dict()
    assert {s["id"] for s in doc["findings"][0]["steps"] if s.get("cleanup")} == {s.id for s in cleanup}
    assert all("cleanup" not in s for s in doc["findings"][0]["steps"] if s["id"] not in {c.id for c in cleanup})


def test_a_short_answer_has_no_empty_blocks(run):
    text = diagnosis_text(run(HF + DS + DS_DUMP + COLLAPSE))
    assert "if those are not enough:" not in text and "also clean up and check:" not in text
    assert '"gradient_clipping": 0.5   # was 1.0' in text


def test_korean_blocks_are_korean(run):
    text = diagnosis_text(run(TCP_DOCKER0), "ko")
    assert "그래도 부족하면:" in text and "함께 정리·점검할 것:" in text and "정리할 것:" not in text.split("함께 정리·점검할 것:")[1]


def test_facts_only_when_verbose_and_always_in_json(run):
    d = run(TCP)
    assert "facts:" not in diagnosis_text(d)
    assert "facts: expected_because=" in diagnosis_text(d, verbose=True)
    assert json.loads(json.dumps(d.to_json_dict()))["findings"][0]["facts"]["socket_interfaces"]


def test_a_log_read_only_in_part_is_healthy_only_in_the_parts_read():
    from bot.answer.render import verdict_lines
    from bot.slack.blocks import diagnosis_blocks
    from core.models import Diagnosis, InputInfo
    whole = Diagnosis(input=InputInfo(name="job.log", bytes=10, lines=3))
    part = Diagnosis(input=InputInfo(name="job.log", bytes=10, lines=3, truncated=True))
    assert "looks healthy" in verdict_lines(whole, "en")[0]
    assert "in the parts read" in verdict_lines(part, "en")[0] and "looks healthy" not in verdict_lines(part, "en")[0]
    assert "white_check_mark" in json.dumps(diagnosis_blocks(whole)[0])
    assert "white_check_mark" not in json.dumps(diagnosis_blocks(part)[0])


def test_counts_in_step_texts_read_as_people_write_them(run):
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.11 GiB of which 1.06 GiB is free.\n")
    d = run("Total params: 70,553,706,496\n" + oom)
    step = next(s for s in d.findings[0].steps if s.id == "cuda_oom.memory_math")
    assert "With 70.6B parameters" in step.text and "70553706496" not in step.text
    from playbooks.engine import _count
    assert (_count(350_000_000), _count(1_200_000_000_000), _count(999_999)) == ("350M", "1.2T", "999999")


def test_a_steps_deepspeed_keys_under_one_top_key_paste_as_one_fragment():
    from bot.answer.render import change_lines
    lines = change_lines([Change(kind="config", name="zero_optimization.stage", to=3, from_=2),
                          Change(kind="config", name="zero_optimization.offload_optimizer.device", to="cpu"),
                          Change(kind="config", name="gradient_clipping", to=0.5)])
    assert lines == ['"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"}}   # stage was 2',
                     '"gradient_clipping": 0.5']
    one = json.loads("{" + lines[0].split("   #")[0] + "}")
    assert one["zero_optimization"]["stage"] == 3     # nothing lost when pasted
