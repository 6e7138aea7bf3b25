"""straggler and pipeline_bubble (issue 15): a slow rank named by the straggler detectors, and a pipeline with too few
micro-batches per step; each at and just past its threshold, and the healthy shapes that must stay quiet."""
import re

import pytest

from conftest import corpus_texts

CASES = corpus_texts("wave8")


def _detector(lo: float, hi: float, slow: int, clock: int = 1980) -> str:
    return (f" 0: INFO:megatron.core.utils:[2025-01-01 10:00:00] | MnRtt/Rnk: {lo:.2f}ms/4 | MxRtt/Rnk: {hi:.2f}ms/{slow} | "
            f"MnPwr/Rnk: 600000W/4 | MxPwr/Rnk: 690000W/{slow} | MnClk/Rnk: {clock}MHz/{slow} | MxClk/Rnk: 1980MHz/4 | "
            f"MnEtpt/Rnk: 250.00TF/{slow} | MxEtpt/Rnk: 300.00TF/4")


def _ranks(findings):
    return [f.facts["slow_ranks"] for f in findings if f.symptom == "straggler"]


@pytest.mark.parametrize("spread,fires", [(1.099, False), (1.10, True), (1.5, True)])
def test_megatron_detector_spread_threshold(run, spread, fires):
    text = "\n".join(_detector(1000.0, 1000.0 * spread, 9) for _ in range(4))
    assert _ranks(run(text).findings) == ([[9]] if fires else [])


def test_megatron_detector_names_the_host_and_a_throttled_clock(run):
    nccl = "ip-10-1-2-3:5120:5301 [1] NCCL INFO comm 0x55d0c0a1b2c0 rank 9 nranks 16 cudaDev 1 nvmlDev 1 busId 20 commId 0x1 - Init COMPLETE"
    text = nccl + "\n" + "\n".join(_detector(1000.0, 1300.0, 9, clock=1200) for _ in range(3))
    f = run(text).findings[0]
    assert (f.facts["lagging_hosts"], f.facts["clock_mhz"], f.facts["slowdown_pct"]) == (["ip-10-1-2-3"], 1200.0, 30.0)
    assert [s.id for s in f.steps][:2] == ["straggler.drain_and_test", "straggler.throttled"]


def test_megatron_detector_warmup_and_a_wandering_slowest_rank_stay_quiet(run):
    assert run(CASES["w8-meg-straggler-warmup-only"]).findings == []
    assert run(CASES["w8-meg-straggler-jitter"]).findings == []
    # two slow reports of four, with two different ranks: neither is a straggler
    text = "\n".join([_detector(1000, 1200, 3), _detector(1000, 1200, 5), _detector(1000, 1010, 3), _detector(1000, 1010, 3)])
    assert run(text).findings == []


@pytest.mark.parametrize("score,fires", [(0.70, False), (0.69, True)])
def test_nvrx_score_threshold(run, score, fires):
    text = "\n".join(["GPU relative performance:", " Worst performing 2/64 ranks:",
                      f"  Rank=33 Node=node-a Score={score:.2f}", "  Rank=2 Node=node-b Score=0.98",
                      " Best performing 1/64 ranks:", "  Rank=0 Node=node-c Score=0.40"])
    assert _ranks(run(text).findings) == ([[33]] if fires else [])   # a "best" list's numbers never count


def test_nvrx_individual_drop_is_named_as_such(run):
    f = run(CASES["w8-nvrx-individual-drop"]).findings[0]
    assert f.facts["slow_ranks"] == [144, 145] and "got slower than they were" in f.title


def test_korean_title_names_the_ranks(run):
    from bot.answer.titles_ko import title
    f = run(CASES["w8-nvrx-relative-two-ranks-one-node"]).findings[0]
    assert title(f).startswith("느린 rank가 작업 전체를 늦춤: rank 20, 21")


@pytest.mark.parametrize("gbs,fires", [(18, False), (16, True)])
def test_bubble_threshold_is_ten_percent(run, gbs, fires):
    # PP 2, DP 1, micro-batch 2: 9 micro-batches give exactly 10% (quiet), 8 give 11.1%
    text = "\n".join(["  pipeline_model_parallel_size ................... 2", "  data_parallel_size ............................. 1",
                      f"  global_batch_size .............................. {gbs}", "  micro_batch_size ............................... 2"])
    found = [f for f in run(text).findings if f.symptom == "pipeline_bubble"]
    assert bool(found) is fires
    if fires:
        assert (found[0].facts["micro_batches"], found[0].facts["bubble_pct"]) == (8, 11.1)


def test_smaller_micro_batch_keeps_the_global_batch(run):
    text = "\n".join(["using world size: 32, data-parallel size: 2, context-parallel size: 1, tensor-model-parallel size: 4, "
                      "pipeline-model-parallel size: 4", "  global_batch_size .............................. 64",
                      "  micro_batch_size ............................... 4", "  num_layers ..................................... 30"])
    f = run(text).findings[0]
    # 64 / (4 · 2) = 8 micro-batches; a micro-batch of 2 gives 16 = 4 per stage; 30 layers / 4 stages do not split: no VPP
    assert (f.facts["micro_batches"], f.facts["target_micro_batch_size"]) == (8, 2)
    assert "target_virtual_stages" not in f.facts
    changes = [(c.name, c.from_, c.to) for s in f.steps for c in s.changes]
    assert ("--micro-batch-size", 4, 2) in changes and not any(c[0] == "--global-batch-size" for c in changes)


@pytest.mark.parametrize("case", ["w8-meg-pp4-m64-healthy", "w8-meg-pp8-vpp4-m32-healthy", "w8-meg-pp1-healthy",
                                  "w8-ds-pipe-2stages-m32-healthy", "w8-meg-pp2-m16-healthy"])
def test_enough_micro_batches_stay_quiet(run, case):
    assert run(CASES[case]).findings == []


def test_virtual_pipeline_counts(run):
    f = run(CASES["w8-meg-pp4-vpp2-m4"]).findings[0]
    assert (f.facts["virtual_stages"], f.facts["bubble_pct"]) == (2, 27.3)
    assert "target_virtual_stages" not in f.facts   # interleaving is on already


def test_rampup_start_is_judged_when_the_full_batch_is_fine(run):
    f = run(CASES["w8-meg-pp4-rampup-start"]).findings[0]
    assert f.rule == "pipeline_bubble.rampup"
    assert (f.facts["micro_batches"], f.facts["bubble_pct"], f.facts["full_pipeline_batch"]) == (4, 42.9, 128)
    change = [(c.name, c.from_, c.to) for s in f.steps for c in s.changes]
    assert change == [("--rampup-batch-size", "32 32 2000000", "128 32 2000000")]
    assert run(CASES["w8-meg-rampup-starts-full"]).findings == []


def test_full_batch_bubble_wins_over_the_rampup(run):
    f = run(CASES["w8-meg-pp12-rampup-full-batch-64"]).findings[0]
    assert (f.rule, f.facts["micro_batches"], f.facts["bubble_pct"]) == ("pipeline_bubble.micro_batches", 64, 14.7)


def test_old_virtual_pipeline_flag_counts(run):
    f = run(CASES["w8-meg-old-vpp-flag"]).findings[0]
    assert (f.facts["virtual_stages"], f.facts["bubble_pct"]) == (2, 27.3)


def test_a_megatron_process_that_does_not_train_has_no_bubble(run):
    # Megatron's text-generation server and checkpoint tools dump the same arguments with neither length set
    base = CASES["w8-meg-pp2-m2"]
    assert run(base).findings[0].symptom == "pipeline_bubble"   # the argument dump gives train_iters 20000
    inference = re.sub(r"(  train_iters \.+ )20000", r"\g<1>None\n  train_samples " + "." * 35 + " None", base)
    assert inference != base and run(inference).findings == []


def test_nvrx_prints_sets_and_lists_every_rank_of_a_small_job(run):
    """NVRx's own callback: the affected ranks are a set ({5}), and a job with few ranks gets every rank listed
    right under the header, with no "Worst performing" line."""
    f = run(CASES["w8-nvrx-ptl-small-world"]).findings[0]
    assert (f.facts["slow_ranks"], f.facts["score"], f.facts["lagging_hosts"]) == ([5], 0.48, ["ip-10-1-7-21"])
    assert run(CASES["w8-nvrx-set-braces-only"]).findings[0].facts["slow_ranks"] == [12, 13]
    assert run(CASES["w8-nvrx-ptl-small-world-healthy"]).findings == []


def test_nvrx_individual_scores_count_without_the_warning(run):
    text = "\n".join(["GPU individual performance:", " Worst performing 2/64 ranks:",
                      "  Rank=40 Node=node-f Score=0.55", "  Rank=3 Node=node-a Score=0.97",
                      " Best performing 1/64 ranks:", "  Rank=0 Node=node-a Score=1.00"])
    f = run(text).findings[0]
    assert (f.facts["slow_ranks"], f.facts["score"]) == ([40], 0.55) and "got slower than" in f.title
    assert run(text.replace("0.55", "0.71")).findings == []


def _minmax(spread: float, reports: int = 4, extra: str = "") -> str:
    out = []
    for _ in range(reports):
        out.append("(min, max) time across ranks (ms):")
        for name, hi in (("forward-backward", 5000.0), ("forward-compute", 1500.0), ("backward-compute", 3000.0)):
            lo = hi / spread if name.endswith("compute") else hi * 0.99
            out.append(f"    {(name + ' ').ljust(48, '.')}: ({lo:.2f}, {hi:.2f})")
        out += [extra] if extra else []
    return "\n".join(out)


@pytest.mark.parametrize("spread,fires", [(1.19, False), (1.21, True)])
def test_megatron_minmax_compute_spread(run, spread, fires):
    found = [f for f in run(_minmax(spread)).findings if f.symptom == "straggler"]
    assert bool(found) is fires
    if fires:
        f = found[0]
        assert (f.rule, f.facts["slowdown_pct"]) == ("straggler.megatron_timers", 21.0)
        assert [s.id for s in f.steps][0] == "straggler.name_the_rank"
        assert "straggler.drain_and_test" not in [s.id for s in f.steps]   # no rank to drain yet


def test_minmax_spread_with_pipeline_stages_or_experts_is_not_a_straggler(run):
    assert run(_minmax(1.5, extra="    " + ("forward-recv ").ljust(48, ".") + ": (10.00, 900.00)")).findings == []
    args = "  pipeline_model_parallel_size .................... 4\n"
    assert [f for f in run(args + _minmax(1.5)).findings if f.symptom == "straggler"] == []
    moe = "  num_experts ..................................... 64\n"
    assert run(moe + _minmax(1.5)).findings == []


def _sniff(metric: str, unit: str, pct: float, rank: int = 13, host: str = "node-2") -> str:
    median = 700.0
    return "\n".join(["INFO:megatron.training.gpu_sniff_test:  GPU sniff test -- iteration 500",
                      f"INFO:megatron.training.gpu_sniff_test:  {metric} [{unit}]: median={median:.2f}, mean=690.00, "
                      f"min=500.00, max=720.00",
                      f"WARNING:megatron.training.gpu_sniff_test:    OUTLIER rank {rank} ({host}): "
                      f"{median * (1 + pct / 100):.2f} ({pct / 100:+.1%})"])


def test_sniff_test_names_a_rank_below_the_median_with_its_host(run):
    f = run(_sniff("GEMM throughput (8192x8192x8192, bf16)", "TFLOP/s/GPU", -12.5)).findings[0]
    assert (f.rule, f.facts["slow_ranks"], f.facts["lagging_hosts"], f.facts["below_median_pct"]) == \
        ("straggler.sniff_test", [13], ["node-2"], 12.5)
    assert "GEMM throughput" in f.title and [s.id for s in f.steps][0] == "straggler.drain_and_test"
    from bot.answer.titles_ko import title
    assert title(f) == "느린 rank가 작업 전체를 늦춤: rank 13 (GPU sniff test에서 중앙값보다 12.5% 낮음)"


@pytest.mark.parametrize("metric,unit,pct", [
    ("GEMM throughput (8192x8192x8192, bf16)", "TFLOP/s/GPU", 14.0),         # faster than the rest: nobody waits
    ("Send/recv busbw (DP PG, 1 MB, e.g., rank 0 <-> rank 8)", "GB/s", -30.0),   # latency jitter at 1 MB
    ("All-reduce busbw (global PG, size=64, 1 MB)", "GB/s", -25.0),
])
def test_sniff_test_outliers_that_name_no_straggler(run, metric, unit, pct):
    assert run(_sniff(metric, unit, pct)).findings == []


def test_sniff_test_large_message_bandwidth_counts(run):
    f = run(_sniff("All-reduce busbw (global PG, size=64, 268 MB)", "GB/s", -40.0, rank=24, host="gpu-17")).findings[0]
    assert f.facts["slow_ranks"] == [24] and "bus bandwidth" in f.title
