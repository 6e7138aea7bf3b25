"""`triage plan` (issue 17): only valid layouts (TP within a node, PP dividing the layers, TP × PP × DP = GPUs),
memory per GPU from the seeds' byte counts, the least sharding that fits, the seed's starting rows, and the
smallest instance that fits when no GPU is given."""
import json
import subprocess
import sys

import pytest

from conftest import ROOT
from core import plan as P

M70 = P.Model.of(70e9, 4096)


def test_every_candidate_is_a_valid_layout():
    for c in P.candidates(M70, 64, 80):
        assert c.tp * c.pp * c.dp == 64 and c.tp <= 8 and 80 % c.pp == 0
        assert c.vpp is None or (80 // c.pp) % c.vpp == 0


def test_state_bytes_follow_the_sharding():
    assert P.states_bytes_per_param(0, 8) == 18 and P.states_bytes_per_param(1, 4) == 9
    assert P.states_bytes_per_param(2, 8) == 6 and P.states_bytes_per_param(3, 6) == 3


def test_memory_of_a_known_layout():
    # TP 8 · PP 2 · DP 4 with the distributed optimizer: 70e9/16 params × 9 bytes = 36.7 GiB of states; activations
    # 34·4096·1·8192/8 bytes × 40 layers × 2 micro-batches in flight = 10.6 GiB
    assert P.memory(M70, 8, 2, 4, 1, "selective", 1) == (36.7, 10.6, 50.3)


def test_the_best_70b_layouts_fit_and_the_seed_row_is_among_them():
    cands = P.candidates(M70, 64, 80)
    assert all(c.fits for c in cands[:5])
    assert any((c.tp, c.pp, c.dp, c.zero_stage) == (8, 2, 4, 1) for c in cands[:3])
    assert [r["tp"] for r in P.seed_rows(70e9)] == [8, 4]


def test_a_slow_network_prefers_pipeline_over_data_parallel():
    best = P.candidates(M70, 64, 80, "slow")[0]
    assert best.pp >= 4 and best.dp <= 2


def test_nothing_fits_on_too_few_gpus_and_the_closest_come_first():
    cands = P.candidates(M70, 8, 80)
    assert not any(c.fits for c in cands)
    assert cands[0].total == min(c.total for c in cands)
    assert P.min_gpus(M70, 80) == 23


def test_smallest_instance_that_fits():
    assert P.choose_instance(P.Model.of(7e9, 4096), 8, "efa", 1) == ("p4d.24xlarge", "a100-40gb")
    assert P.choose_instance(M70, 16, "efa", 1)[0] != "p4d.24xlarge"


@pytest.mark.parametrize("text,value", [("70B", 70e9), ("1.3b", 1.3e9), ("800M", 8e8)])
def test_parameter_counts(text, value):
    assert P.parse_count(text) == value


def test_cli_json_and_bad_input():
    run = lambda *a: subprocess.run([sys.executable, "-m", "bot.cli", "plan", *a], cwd=ROOT,   # noqa: E731
                                    capture_output=True, text=True)
    out = run("--params", "70B", "--gpus", "64", "--gpu", "h100-80gb", "--json")
    doc = json.loads(out.stdout)
    assert doc["schema"] == "triage.plan/v1" and doc["min_gpus"] == 23
    c = doc["candidates"][0]
    assert set(c) >= {"dp", "tp", "pp", "ep", "cp", "vpp", "zero_stage", "micro_batch", "memory_gib", "fits", "why",
                      "source"}
    assert set(c["memory_gib"]) == {"states", "activations", "total"}
    bad = run("--params", "seventy", "--gpus", "8")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr


OOM_ARGS = ("------------------------ arguments ------------------------\n"
            "  hidden_size ..................................... 8192\n"
            "  micro_batch_size ................................ 4\n"
            "  num_layers ...................................... 80\n"
            "  pipeline_model_parallel_size .................... 4\n"
            "  seq_length ...................................... 4096\n"
            "  tensor_model_parallel_size ...................... 4\n"
            "  use_distributed_optimizer ....................... True\n"
            "  world_size ...................................... 64\n"
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
            "79.11 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.04 GiB memory in use.\n")


def test_the_oom_answer_estimates_the_jobs_own_memory_and_what_each_rung_saves(run):
    d = run(OOM_ARGS)
    step = next(s for s in d.findings[0].steps if s.id == "cuda_oom.memory_math")
    assert "needs about 121.8 GiB per GPU" in step.text and "against the GPU's 79.11 GiB" in step.text
    assert "Halving the micro-batch saves about 42.5 GiB" in step.text and "(?)" not in step.text


def test_job_memory_needs_the_shape():
    assert P.job_memory({"micro_batch_size": 4}) == {}
    mem = P.job_memory({"num_layers": 32, "hidden_size": 4096, "micro_batch_size": 1})
    assert "mem_saved_half_micro_gib" not in mem and mem["mem_total_gib"] > 0


def test_each_oom_rung_says_what_it_saves_for_this_job(run):
    """Issue 17: full recomputation and the next sharding step state their saving, computed from the job's config."""
    log = (OOM_ARGS.replace("use_distributed_optimizer ....................... True",
                            "use_distributed_optimizer ....................... False")
           .replace("  world_size", "  recompute_granularity ........................... selective\n  world_size"))
    d = run(log)
    mem = P.job_memory(d.job)
    assert mem["mem_saved_full_recompute_gib"] > 10 and mem["mem_saved_more_sharding_gib"] > 10
    steps = {s.id: s.text for s in d.findings[0].steps}
    assert f"about {mem['mem_saved_full_recompute_gib']} GiB less per GPU" in steps["cuda_oom.activation_checkpointing"]
    assert f"about {mem['mem_saved_more_sharding_gib']} GiB less per GPU" in steps["cuda_oom.zero2"]
    assert "distributed optimizer" in steps["cuda_oom.zero2"]
    # the job already shards with the distributed optimizer and recomputes fully: no such rung, no saving claimed
    done = run(OOM_ARGS.replace("  world_size", "  recompute_granularity ........................... full\n  world_size"))
    assert not {"mem_saved_full_recompute_gib", "mem_saved_more_sharding_gib"} & set(P.job_memory(done.job))
    assert all("GiB less per GPU" not in s.text for s in done.findings[0].steps)


# MoE and context parallelism (issue 17)
MIXTRAL = P.Model.of(47e9, 4096, experts=8, active=13e9)


def test_moe_shape_comes_from_the_nearest_public_model_and_the_expert_split_from_active_parameters():
    # total = shared + 8·e and active = shared + 2·e: e = 34/6 B, so 45.3B of the 47B sit in experts
    assert (MIXTRAL.layers, MIXTRAL.hidden) == (32, 4096)
    assert MIXTRAL.expert_params == pytest.approx(8 * 34e9 / 6)
    ffn = MIXTRAL.expert_params / 8 / 32 / (3 * 4096)
    assert 14000 < ffn < 14800   # Mixtral's expert FFN is 14336 wide
    with pytest.raises(P.PlanError):
        P.Model.of(47e9, 4096, experts=8, active=50e9)
    with pytest.raises(P.PlanError):
        P.Model.of(47e9, 4096, experts=8, active=13e9, top_k=8)


def test_moe_memory_of_a_known_layout():
    # the seed's DP 2 · TP 2 · PP 2 · EP 4 on 32 GPUs with the distributed optimizer: dense weights (1.67B) are split
    # over TP·PP = 4 and sharded over DP·EP = 8 ranks (6 + 12/8 bytes), experts (45.3B) over EP·TP·PP = 16 and
    # sharded over DP = 2 (6 + 12/2 bytes); activations per token and layer 15h + 2·1.25·(3h + 6F), / TP,
    # 16 layers × 2 micro-batches in flight
    dense, experts = 47e9 - MIXTRAL.expert_params, MIXTRAL.expert_params
    states = (dense / 4 * 7.5 + experts / 16 * 12) / P.GIB
    ffn = experts / 8 / 32 / (3 * 4096)
    acts = (15 * 4096 + 2 * 1.25 * (3 * 4096 + 6 * ffn)) * 4096 / 2 * 32 / P.GIB
    got = P.memory(MIXTRAL, 2, 2, 2, 1, "selective", 1, ep=4)
    assert got == (round(states, 1), round(acts, 1), round(states + acts + P.RESERVE_GIB, 1)) == (34.6, 18.8, 56.4)


def test_every_moe_candidate_is_a_valid_layout_and_ep_beyond_the_node_costs():
    cands = P.candidates(MIXTRAL, 32, 80)
    assert {c.ep for c in cands} == {1, 2, 4, 8}
    for c in cands:
        assert c.dp * c.tp * c.pp * c.ep * c.cp == 32 and 8 % c.ep == 0 and c.tp <= 8 and c.cp == 1
    best = cands[0]
    assert best.fits and best.ep * best.tp <= 8
    inside = P.evaluate(MIXTRAL, 1, 4, 1, 80, 1, ep=8)
    across = P.evaluate(MIXTRAL, 2, 2, 1, 80, 1, ep=8)   # EP × TP = 16 leaves the node
    assert P.cost(across, "efa") > P.cost(inside, "efa")
    assert "spans nodes" in " ".join(across.why) and "--expert-model-parallel-size 8" in across.megatron_args()


def test_moe_seed_rows_by_size():
    rows = P.seed_rows(47e9, moe=True)
    assert [(r["gpus"], r["dp"], r["tp"], r["pp"], r["ep"]) for r in rows] == [(32, 2, 2, 2, 4), (64, 2, 2, 2, 8)]
    assert [r["ep"] for r in P.seed_rows(671e9, moe=True)] == [8, 8]


def test_context_parallelism_only_for_long_sequences_and_it_splits_activations():
    assert {c.cp for c in P.candidates(M70, 64, 80)} == {1}
    long = P.Model.of(8e9, 131072)
    cands = P.candidates(long, 64, 80)
    assert {c.cp for c in cands} == {1, 2, 4, 8} and cands[0].cp > 1
    one, two = P.memory(long, 8, 1, 8, 1, "selective", 1), P.memory(long, 8, 1, 4, 1, "selective", 1, cp=2)
    assert two[1] == pytest.approx(one[1] / 2, abs=0.1)
    assert "--context-parallel-size" in cands[0].megatron_args()


def test_cli_moe_json_text_and_bad_input():
    run = lambda *a: subprocess.run([sys.executable, "-m", "bot.cli", "plan", *a], cwd=ROOT,   # noqa: E731
                                    capture_output=True, text=True)
    moe = ("--params", "47B", "--experts", "8", "--active-params", "13B", "--gpus", "32", "--gpu", "h100-80gb")
    doc = json.loads(run(*moe, "--json").stdout)
    assert doc["model"]["dense"] is False and doc["model"]["experts"] == 8 and doc["model"]["active_params"] == 13e9
    assert all(c["dp"] * c["tp"] * c["pp"] * c["ep"] * c["cp"] == 32 for c in doc["candidates"])
    seed = next(r for r in doc["seed_rows"] if r["gpus"] == 32)
    assert seed["fits"] and seed["memory_gib"] == 56.4
    text = run(*moe).stdout
    assert "47B MoE model (8 experts, top-2, 13B active" in text and "Megatron: --tensor-model-parallel-size" in text
    bad = run("--params", "47B", "--experts", "8", "--gpus", "32")
    assert bad.returncode == 2 and "--active-params" in bad.stderr and bad.stderr.count("\n") == 1


def test_slack_plan_words_take_moe_flags_and_bad_numbers_get_one_line():
    from bot.answer.plan import plan_text
    text = plan_text("47B 32 h100-80gb --experts 8 --active-params 13B --top 1")
    assert "EP 4" in text and "here 56.4 GiB per GPU" in text
    for words, said in (("47B 32 --experts 8", "--active-params"), ("47B 32 --experts x", "--experts must be a whole"),
                        ("671B 1024 --experts 256 --active-params 37B --top-k 256", "--top-k below --experts")):
        with pytest.raises(ValueError, match=said):
            plan_text(words)
    assert "no divisor" in plan_text("671B 1024 h100-80gb --experts 256 --active-params 37B --top-k 8 --top 1")


def test_moe_recompute_is_a_rung_between_selective_and_full():
    sel, moe, full = (P.memory(MIXTRAL, 1, 4, 1, 1, r, 1, ep=8)[1] for r in ("selective", "moe", "full"))
    assert sel > moe > full
    c = P.evaluate(MIXTRAL, 1, 4, 1, 80, 2, ep=8)   # micro-batch 2 does not fit with selective alone
    assert c.recompute == "moe" and "--recompute-modules core_attn moe" in c.megatron_args()
    assert "MoE layers recomputed" in " ".join(c.why)


def test_logits_count_only_when_the_first_stage_is_also_the_last():
    small = P.Model.of(1.3e9, 4096)
    assert small.vocab == 50304
    with_logits = P.memory(small, 1, 1, 8, 1, "selective", 4)[1]
    without = P.memory(P.Model.of(1.3e9, 4096, vocab=0), 1, 1, 8, 1, "selective", 4)[1]
    assert with_logits - without == pytest.approx(10 * 50304 * 4096 * 4 / P.GIB, abs=0.1)
    assert P.memory(small, 1, 2, 4, 1, "selective", 4)[1] == P.memory(
        P.Model.of(1.3e9, 4096, vocab=0), 1, 2, 4, 1, "selective", 4)[1]


def test_published_error_against_real_megatron_runs():
    """docs/planning.md's accuracy table is what `triage plan --accuracy` computes from the real runs' printed lines; states
    stay within 3% of Megatron's own figure and the peak estimate within the published band."""
    from knowledge import plan_accuracy
    for r in plan_accuracy.rows():
        assert abs(r["states_error"]) < 0.03, r
        assert -0.2 < r["error"] < 0.05, r
    assert plan_accuracy.table() in (ROOT / "docs" / "planning.md").read_text(encoding="utf-8")


def test_pipeline_and_zero3_rungs_say_what_they_save_for_this_job(run):
    """Issue 17: when TP is already 8, the pipeline rung states its saving (model states only: the first stage
    keeps the same activations under 1F1B); a DeepSpeed job's last rung states what ZeRO-3 + offload takes off."""
    log = OOM_ARGS.replace("tensor_model_parallel_size ...................... 4",
                           "tensor_model_parallel_size ...................... 8")
    d = run(log)
    mem = P.job_memory(d.job)
    step = next(s for s in d.findings[0].steps if s.id == "cuda_oom.pipeline_parallel")
    assert f"saves about {mem['mem_saved_next_pp_gib']} GiB per GPU, all of it model states" in step.text
    before = P.memory(P.Model(12 * 80 * 8192 ** 2, 80, 8192, 1, 4096), 8, 4, 2, 1, "selective", 4)
    after = P.memory(P.Model(12 * 80 * 8192 ** 2, 80, 8192, 1, 4096), 8, 8, 1, 1, "selective", 4)
    assert before[1] == after[1] and mem["mem_saved_next_pp_gib"] == round(before[2] - after[2], 1) > 0
    ds = ("[2024-05-03 10:12:01,332] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.14.2\n"
          "[2024-05-03 10:12:01,332] [INFO] [config.py:1000:print]   zero_optimization_stage ...... 1\n"
          "  num_layers ...................................... 32\n  hidden_size ..................................... 4096\n"
          "  world_size ...................................... 16\n"
          + OOM_ARGS[OOM_ARGS.index("torch."):])
    d = run(ds)
    mem = P.job_memory(d.job)
    last = next(s for s in d.findings[0].steps if s.id == "cuda_oom.zero3_offload")
    assert mem["mem_saved_zero3_offload_gib"] > 20
    assert f"about {mem['mem_saved_zero3_offload_gib']} GiB of model states off each GPU" in last.text


def test_without_sequence_parallelism_part_of_each_layer_stays_whole_per_tp_rank():
    # Korthikanti et al.: s·b·h·(10 + 24/t) per layer without SP against 34/t with it (selective recompute)
    no_sp = P.Model.of(70e9, 4096, sp=False)
    sp = P.memory(M70, 8, 2, 4, 1, "selective", 1)[1]
    plain = P.memory(no_sp, 8, 2, 4, 1, "selective", 1)[1]
    assert plain == pytest.approx(sp * (10 + 24 / 8) / (34 / 8), abs=0.1)
    c = P.evaluate(no_sp, 8, 2, 4, 80, 1)
    assert "--sequence-parallel" not in c.megatron_args() and "no sequence parallelism" in " ".join(c.why)
    from bot.answer.plan import plan_text
    assert "--sequence-parallel" not in plan_text("70B 64 h100-80gb --no-sequence-parallel --top 1")


def test_a_400_gbps_efa_instance_across_nodes_is_planned_as_a_slow_network():
    assert P.instance_of("a100-40gb") == "p4d.24xlarge" and P.instance_of("b200-180gb") == "p6-b200.48xlarge"
    assert P.network_for("efa", "p4de.24xlarge", 64) == "slow"
    assert P.network_for("efa", "p4de.24xlarge", 8) == "efa"      # one node: no EFA traffic to speak of
    assert P.network_for("efa", "p5.48xlarge", 64) == "efa"
    assert P.network_for("ib", "p4d.24xlarge", 64) == "ib"        # the user said what the fabric is
    run = lambda *a: subprocess.run([sys.executable, "-m", "bot.cli", "plan", *a], cwd=ROOT,   # noqa: E731
                                    capture_output=True, text=True)
    doc = json.loads(run("--params", "70B", "--gpus", "64", "--gpu", "a100-80gb", "--json").stdout)
    assert doc["efa_gbps_per_node"] == 400 and doc["network_planned"] == "slow"
    slow_best = P.candidates(M70, 64, 80, "slow")[0]
    assert (doc["candidates"][0]["tp"], doc["candidates"][0]["pp"]) == (slow_best.tp, slow_best.pp)


def test_a_seed_row_whose_figure_needs_more_sharding_says_so():
    """Issue 30: the seed's 64-GPU rows say ZeRO 1; on 40 GiB GPUs their memory figure holds only with ZeRO 3."""
    out = subprocess.run([sys.executable, "-m", "bot.cli", "plan", "--params", "70B", "--gpus", "64", "--network",
                          "slow", "--layers", "80", "--hidden", "8192", "--seq-len", "8192"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60).stdout
    rows = [ln for ln in out.splitlines() if ln.startswith("Seed starting point")]
    assert rows and all("ZeRO 1 does not fit" in r and "needs ZeRO 3" in r for r in rows)
    assert not any(r.endswith("GiB per GPU") for r in rows)


def test_the_seeds_rule_of_thumb_is_shown_beside_the_planners_count():
    """000 §2's checklist: 70B × 12 bytes (fp16 Adam) = 840 GB, at least 11 GPUs of 80 GB before activations; the
    planner's own count (18 bytes, 1.5× headroom) stays the one it plans with."""
    from bot.answer.plan import plan_text
    text = plan_text("--params 70B --gpus 64 --gpu a100-80gb")
    assert "P × 12 bytes for fp16 Adam = 840 GB, gives 11 before activations" in text
    assert "at least 23 GPUs of 80 GiB at 1.5× headroom" in text
