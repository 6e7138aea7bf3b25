"""Advice the job would accept (issue 30): every change in the vocabulary of the framework the log shows, the setting
a change displaces removed with it, DeepSpeed's JSON named where DeepSpeed runs the optimizer under Megatron or the
HF Trainer, a hang's timeout in each framework's own knob and unit, and no raw name of a framework the job does not
run (no DeepSpeed key on a Megatron job, no docker option where no container is in sight)."""
import pytest

from core.models import Change, Diagnosis, Finding, InputInfo, Step

TIMEOUT = ("[rank1]:[E1104 03:12:44.120011873 ProcessGroupNCCL.cpp:632] [Rank 1] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=1205, OpType=ALLREDUCE, NumelIn=262144, NumelOut=262144, Timeout(ms)=600000) ran "
           "for 600012 milliseconds before timing out.\n")
MEGATRON = "------------------------ arguments ------------------------\n"
HF = "***** Running training *****\n"
DS = "[2026-11-20 04:10:09,512] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.16.4\n"
LIGHTNING = "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [0,1,2,3]\n"
DS_DUMP = ("[2026-11-20 04:10:09,512] [INFO] [config.py:1000:print] DeepSpeedEngine configuration:\n"
           "[2026-11-20 04:10:09,512] [INFO] [config.py:1004:print]   fp16_enabled ................. True\n"
           "[2026-11-20 04:10:09,512] [INFO] [config.py:1004:print]   bfloat16_enabled ............. False\n"
           "[2026-11-20 04:10:09,512] [INFO] [config.py:1004:print]   gradient_clipping ............ 1.0\n"
           "[2026-11-20 04:10:09,512] [INFO] [config.py:1004:print]   initial_dynamic_scale ........ 65536\n")
COLLAPSE = ("[INFO] [loss_scaler.py:183:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
            "2, reducing to 1\n"
            "[INFO] [loss_scaler.py:176:update_scale] [deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: "
            "1, but hysteresis is 2. Reducing hysteresis to 1\n"
            "Traceback (most recent call last):\n"
            '  File "/opt/conda/lib/python3.10/site-packages/deepspeed/runtime/fp16/loss_scaler.py", line 173, in update_scale\n'
            "Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.\n")


def _all(d):
    return [(s.id, c.kind, c.name, c.from_, c.to) for s in d.findings[0].steps for c in s.changes]


def _names(d):
    return {c[2] for c in _all(d)}


@pytest.mark.parametrize("head,change", [
    (MEGATRON + "  distributed_timeout_minutes ..... 10\n", ("flag", "--distributed-timeout-minutes", 10, 30)),
    (HF, ("flag", "--ddp_timeout", 600, 1800)),                     # the HF Trainer counts seconds
    (DS, ("config", "deepspeed.init_distributed(timeout=…)", "timedelta(minutes=10)", "timedelta(minutes=30)")),
    (LIGHTNING, ("config", "Trainer(strategy=DDPStrategy(timeout=…))", "timedelta(minutes=10)", "timedelta(minutes=30)")),
    ("", ("config", "dist.init_process_group(timeout=…)", "timedelta(minutes=10)", "timedelta(minutes=30)")),
])
def test_a_hangs_timeout_is_the_jobs_own_knob_in_its_own_unit(run, head, change):
    d = run(head + TIMEOUT)
    timeout = [c[1:] for c in _all(d) if c[0] == "nccl_timeout.timeout_value"]
    assert timeout == [change]
    if head != MEGATRON + "  distributed_timeout_minutes ..... 10\n":
        assert "--distributed-timeout-minutes" not in _names(d)


def test_an_unrecognised_framework_gets_one_setting_with_every_spelling(run):
    c = next(c for s in run(TIMEOUT).findings[0].steps for c in s.changes if "timeout" in c.name)
    assert c.note.startswith("framework not recognised")
    for other in ("Megatron: --distributed-timeout-minutes", "HF Trainer: --ddp_timeout",
                  "DeepSpeed: deepspeed.init_distributed(timeout=…)"):
        assert other in c.note


def test_megatron_bf16_removes_the_fp16_flag_the_log_shows(run, books):
    spike = "".join(f" iteration {i * 10}/ 1000 | lm loss: {v}E+00 |\n"
                    for i, v in enumerate([1.4412, 1.4305, 1.4251, 1.4198, 7.9013], 1))
    d = run(MEGATRON + "  fp16 ............................ True\n" + spike)
    bf16 = [c[1:] for c in _all(d) if c[0] == "loss.bf16"]
    assert bf16 == [("flag", "--bf16", None, True), ("flag", "--fp16", True, None)]   # to: null is a removal
    # near miss: a log that does not show --fp16 gets no removal, only the reminder
    from playbooks.engine import steps_for
    nan = Finding(symptom="loss_nan", rule="loss_nan.series", title="NaN loss", severity="error", confidence=0.9)
    step = next(s for s in steps_for(nan, {}, {"framework": "megatron"}, books) if s.id == "loss.bf16")
    assert [c.name for c in step.changes] == ["--bf16"] and "drop --fp16 if it is set" in step.changes[0].note


def test_megatron_deepspeed_scale_collapse_changes_the_deepspeed_json(run):
    d = run(MEGATRON + DS + DS_DUMP + COLLAPSE)
    assert d.job["framework"] == "megatron" and d.job["sharding_engine"] == "deepspeed"
    changes = _all(d)
    assert ("loss.scale_power", "config", "fp16.initial_scale_power", 16, 12) in changes   # 65536 = 2**16
    assert ("loss.scale_power", "config", "bf16.enabled", None, True) in changes
    assert ("loss.scale_power", "config", "fp16.enabled", True, False) in changes
    assert ("loss.clip", "config", "gradient_clipping", 1.0, 0.5) in changes
    assert not {"--initial-loss-scale", "--clip-grad", "--bf16"} & _names(d)
    assert sum(c[2] == "bf16.enabled" for c in changes) == 1


def test_hf_on_deepspeed_scale_collapse_reads_its_fp16_and_puts_bf16_before_clipping(run):
    d = run(HF + DS + DS_DUMP + COLLAPSE)
    f = d.findings[0]
    assert f.rule == "loss_nan.scale_collapse"
    assert d.job["fp16"] is True and d.job["bf16"] is False and d.job["initial_scale_power"] == 16
    assert any("Current loss scale already at minimum" in e.text for e in f.evidence)
    ids = [s.id for s in f.steps]
    assert ids.index("loss.scale_power") < ids.index("loss.clip")
    assert [c[2] for c in _all(d)].count("gradient_clipping") == 1
    assert not any("If this run uses fp16" in s.text for s in f.steps)
    clip = next(c for s in f.steps for c in s.changes if c.name == "gradient_clipping")
    assert "--max_grad_norm" in clip.note and '"auto"' in clip.note


TCP = ("h1:7:7 [0] NCCL INFO NET/OFI Running on p5.48xlarge platform\n"
       "h1:7:7 [0] nccl_net_ofi_create_plugin:1020 NCCL WARN NET/OFI aws-ofi-nccl initialization failed\n"
       "h1:7:7 [0] NCCL INFO NET/IB : No device found.\n"
       "h1:7:7 [0] NCCL INFO NET/Socket : Using [0]enp71s0:10.1.70.12<0>\n"
       "h1:7:7 [0] NCCL INFO Using network Socket\n"
       "h2:9:9 [0] NCCL INFO NET/Socket : Using [0]enp71s0:10.1.70.13<0>\n"
       "h2:9:9 [0] NCCL INFO Using network Socket\n")


def test_tcp_fallback_gives_no_deepspeed_key_to_a_job_without_deepspeed(run):
    assert not any(n.startswith("zero_optimization") for n in _names(run(TCP)))
    assert not any(n.startswith("zero_optimization") for n in _names(run(MEGATRON + TCP)))
    assert "--overlap-grad-reduce" in _names(run(MEGATRON + TCP))
    assert "zero_optimization.overlap_comm" in _names(run(DS + TCP))


def test_docker_options_only_where_docker_is_in_sight(run):
    d = run(TCP)
    assert "--ulimit" not in _names(d) and "ulimit -l" in _names(d)
    d = run("+ docker run --gpus all --network host nvcr.io/nvidia/pytorch:25.01-py3 torchrun train.py\n" + TCP)
    assert d.job["container"] == "docker"
    assert "--ulimit" in _names(d) and "ulimit -l" not in _names(d)
    # near misses: enroot/pyxis has no docker run options; the host's docker0 bridge is no container at all
    d = run("pyxis: importing docker image: nvcr.io/nvidia/pytorch:25.01-py3\n" + TCP)
    assert d.job["container"] == "enroot" and "--ulimit" not in _names(d) and "ulimit -l" in _names(d)
    d = run("h1:7:7 [0] NCCL INFO Bootstrap : Using docker0:172.17.0.1<0>\n" + TCP)
    assert "container" not in d.job and "--ulimit" not in _names(d)


TCP_DOCKER0 = TCP.replace("enp71s0:10.1.70.12", "docker0:172.17.0.1").replace("enp71s0:10.1.70.13", "docker0:172.17.0.1")


def test_socket_ifname_en_is_clean_up_after_the_root_cause_not_a_fix(run):
    assert "NCCL_SOCKET_IFNAME" not in _names(run(TCP))   # NCCL already picked an en* interface: nothing to pin
    d = run(TCP_DOCKER0)
    steps = d.findings[0].steps
    ids = [s.id for s in steps]
    assert "tcp_fallback.socket_ifname_en" in ids
    at = ids.index("tcp_fallback.socket_ifname_en")
    assert all(not s.text.startswith("Also clean up") for s in steps[:at])
    assert steps[at].text.startswith("Also clean up") and "does not bring EFA back" in steps[at].text


def test_a_raw_deepspeed_key_never_reaches_a_job_of_another_framework(books):
    from playbooks.engine import steps_for
    oom = Finding(symptom="cuda_oom", rule="cuda_oom.alloc", title="CUDA out of memory", severity="error",
                  confidence=0.9, facts={})
    megatron = {c.name for s in steps_for(oom, {}, {"framework": "megatron"}, books) for c in s.changes}
    unknown = {c.name for s in steps_for(oom, {}, {}, books) for c in s.changes}
    assert not any(n.startswith("zero_optimization") for n in megatron)
    assert any(n.startswith("zero_optimization") for n in unknown)   # no framework shown: the name says whose it is


def test_config_patch_removes_the_displaced_flag():
    from bot.patch.patch import patch
    step = Step(id="loss.bf16", owner="ml", text="Use bf16.", cite=["convergence#bf16"],
                changes=[Change(kind="flag", name="--bf16", to=True),
                         Change(kind="flag", name="--fp16", to=None, from_=True, note="remove it")])
    d = Diagnosis(input=InputInfo(name="x", bytes=1, lines=1),
                  findings=[Finding(symptom="loss_spike", rule="loss_spike.series", title="t", severity="warning",
                                    confidence=0.9, steps=[step])])
    script = "torchrun pretrain_gpt.py \\\n    --fp16 \\\n    --lr 3e-4\n"
    p = patch(d, "train.sh", script)
    assert "--fp16" not in p.diff.replace("-    --fp16", "")
    assert "-    --fp16 \\" in p.diff and "+    --bf16" in p.diff.replace("+    --bf16 \\", "+    --bf16")
    assert "--fp16 removed" in p.applied


def test_no_hedge_on_what_the_log_or_the_finding_proves(run, books):
    from playbooks.engine import steps_for
    # Megatron's argument dump says recompute_granularity None: recompute is off, said without "if not on already"
    oom = ("  recompute_granularity ........................... None\n"
           "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.11 GiB of which 1.06 GiB is free.\n")
    d = run(MEGATRON + oom)
    step = next(s for s in d.findings[0].steps if s.id == "cuda_oom.activation_checkpointing")
    assert "if it is not on already" not in step.text and d.job["recompute_activations"] is False
    # a collapsing fp16 loss scale proves fp16: the flag is removed, not "if it is set"
    collapse = Finding(symptom="loss_nan", rule="loss_nan.scale_collapse", title="t", severity="error", confidence=0.9)
    changes = [c for s in steps_for(collapse, {}, {"framework": "megatron"}, books) for c in s.changes]
    assert ("--fp16", None) in [(c.name, c.to) for c in changes]
    assert not any("if it is set" in (c.note or "") for c in changes)
