"""slow_comm (issue 15): nccl-tests bus bandwidth at large messages against what the instance's fabric carries,
and NCCL kernels' share of a torch.profiler CUDA table; the near-misses stay quiet."""

import pytest

from conftest import corpus_texts

CASES = corpus_texts("wave7")


def test_two_p5_nodes_far_below_efa(run):
    f = run(CASES["w7-src-nccltests-p5-tcp"]).findings[0]
    assert (f.rule, f.facts["ratio_pct"], f.facts["nodes"]) == ("slow_comm.nccl_tests", 5.0, 2)


def test_one_node_judged_against_nvlink(run):
    f = run(CASES["w7-src-nccltests-h100-single-low"]).findings[0]
    assert (f.facts["nodes"], f.facts["expected_gbps"]) == (1, 450.0)
    assert [s.id for s in f.steps][0] == "slow_comm.nvlink"


def test_mpirun_tagged_rows_are_read(run):
    text = CASES["w7-src-nccltests-mpirun-p4de-low"].replace(
        "[1,0]<stdout>:# nThread", "[1,0]<stdout>:# all_reduce_perf\n[1,0]<stdout>:# nThread")
    d = run(text.replace(" none      -1", "  sum      -1"))
    assert d.findings[0].facts["busbw_gbps"] == 9.1


def test_profiler_nccl_share(run):
    f = run(CASES["w7-src-prof-ncclbf16-low"]).findings[0]
    assert f.rule == "slow_comm.profiler" and f.facts["comm_share_pct"] == 50.28
    assert f.facts["top_kernel"].startswith("ncclDevKernel_AllGather")


@pytest.mark.parametrize("case", ["w7-src-nccltests-p5-ok", "w7-src-nccltests-p4d-ok", "w7-src-nccltests-small-only",
                                  "w7-src-prof-nccl-ok", "w7-src-prof-ddp-ok"])
def test_healthy_counterparts_stay_quiet(run, case):
    assert run(CASES[case]).findings == []


def test_alltoall_and_unknown_hardware_are_not_judged(run):
    low = CASES["w7-src-nccltests-p5-tcp"]
    assert run(low.replace("# nThread", "$ ./alltoall_perf -b 64M -e 8G\n# nThread", 1)).findings == []
    consumer = CASES["w7-src-nccltests-p4d-low"].replace("NVIDIA A100-SXM4-40GB", "NVIDIA GeForce RTX 4090")
    assert run(consumer).findings == []


TIMER_CASES = corpus_texts("wave9")


def _changes(f):
    return [(c.name, c.to) for s in f.steps for c in s.changes]


@pytest.mark.parametrize("case,kind,change", [
    ("w9-meg-legacy-allreduce-62pct", "megatron_legacy", ("--DDP-impl", "torch")),
    ("w9-meg-core-minmax-sync", "megatron_core", ("--overlap-grad-reduce", True)),
    ("w9-ds-allreduce-microstep", "deepspeed", ("zero_optimization.overlap_comm", True))])
def test_timers_share_and_the_overlap_setting_of_that_stack(run, case, kind, change):
    f = run(TIMER_CASES[case]).findings[0]
    assert (f.rule, f.facts["timers"]) == ("slow_comm.timers", kind) and f.facts["comm_share_pct"] > 40
    assert change in _changes(f)
    others = {"--DDP-impl", "--overlap-grad-reduce", "zero_optimization.overlap_comm"} - {change[0]}
    assert not others & {name for name, _ in _changes(f)}


def test_timers_overlap_already_on_is_not_recommended_again(run):
    text = "  overlap_grad_reduce ............................. True\n" + TIMER_CASES["w9-meg-core-minmax-sync"]
    f = run(text).findings[0]
    assert f.rule == "slow_comm.timers" and "--overlap-grad-reduce" not in {n for n, _ in _changes(f)}


@pytest.mark.parametrize("allreduce,fires", [(40.0, False), (40.2, True)])
def test_timers_threshold(run, allreduce, fires):
    # older Megatron: forward 20 + backward 40 + all-reduce A + optimizer 0 → share A / (60 + A); 40 of 100 is quiet
    line = f"time (ms) | forward-compute: 20.00 | backward-compute: 40.00 | backward-params-all-reduce: {allreduce:.2f} | optimizer: 0.00"
    got = [f.rule for f in run("\n".join([line] * 2)).findings]
    assert got == (["slow_comm.timers"] if fires else [])


@pytest.mark.parametrize("case", ["w9-meg-core-sync-small", "w9-ds-allreduce-small", "w9-meg-legacy-allreduce-small",
                                  "w9-meg-core-first-report-only"])
def test_timers_healthy_counterparts_stay_quiet(run, case):
    assert run(TIMER_CASES[case]).findings == []


def _inspector(busbw: float, size: int = 1 << 30, coll: str = "AllReduce", nodes: int = 2) -> str:
    rec = ('{"header": {"id": "0x1", "rank": %d, "n_ranks": 16, "nnodes": %d}, "coll_perf": {"coll": "%s", '
           '"coll_sn": %d, "coll_msg_size_bytes": %d, "coll_exec_time_us": 1000, "coll_algobw_gbs": 1.0, '
           '"coll_busbw_gbs": %s}}')
    lead = "h0:1:1 [0] NCCL INFO NET/OFI Running on p5.48xlarge platform\n"
    return lead + "\n".join(rec % (r, nodes, coll, r, size, busbw) for r in range(4))


@pytest.mark.parametrize("busbw,fires", [(280.0, False), (279.9, True)])
def test_inspector_records_against_the_fabric(run, busbw, fires):
    # two p5 nodes carry ~400 GB/s of EFA: under 70% of it (280) is slow
    got = [(f.rule, f.facts["busbw_gbps"], f.facts["nodes"]) for f in run(_inspector(busbw)).findings]
    assert got == ([("slow_comm.inspector", 279.9, 2)] if fires else [])


def test_inspector_small_messages_and_alltoall_are_not_judged(run):
    assert run(_inspector(5.0, size=32 << 20)).findings == []
    assert run(_inspector(5.0, coll="AllToAll")).findings == []


def test_inspector_pretty_printed_and_gpu_named(run):
    f = run(TIMER_CASES["w9-inspector-pretty-rs-low"]).findings[0]
    assert (f.facts["op"], f.facts["nodes"], f.facts["instance"]) == ("reduce_scatter", 4, "p5")
    one = run(TIMER_CASES["w9-inspector-h100-one-node-low"]).findings[0]
    assert (one.facts["instance"], one.facts["expected_gbps"], [s.id for s in one.steps][0]) == \
        ("p5", 450.0, "slow_comm.nvlink")
    assert run(TIMER_CASES["w9-inspector-no-instance"]).findings == []


@pytest.mark.parametrize("line", [
    "time (ms) | fwd_microstep: 300.00 | bwd_microstep: 2400.00 | bwd_inner_microstep: 900.00 | "
    "bwd_allreduce_microstep: 1500.00 | step_microstep: 40.00",
    "time (ms) | fwd: 1200.00 | bwd: 9600.00 | bwd_inner: 3600.00 | bwd_allreduce: 6000.00 | step: 160.00",
    "time (ms) | forward: 1200.00 | backward: 9600.00 | backward_inner: 3600.00 | backward_allreduce: 6000.00 | "
    "step: 160.00"])
def test_deepspeed_timer_names_old_and_new_per_micro_step_and_per_step(run, line):
    f = run("\n".join([line] * 2)).findings[0]
    assert (f.rule, f.facts["timers"], f.facts["comm_share_pct"]) == ("slow_comm.timers", "deepspeed", 54.7)


def test_a_step_counter_beside_no_allreduce_timer_is_not_read(run):
    assert run("step: 100 | loss: 2.31 | forward: 10.0 | backward: 30.0\n" * 3).findings == []


def _ds_timers(step_ms):
    return "".join(f"[2024-05-01 10:0{i}:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] time (ms) | forward: 380.10 | "
                   f"backward: 861.20 | backward_inner: 805.00 | backward_allreduce: 56.20 | step: {step_ms}\n"
                   for i in range(4))


def test_an_optimizer_step_that_takes_most_of_the_step_leaves_the_gpus_idle(run):
    d = run(_ds_timers("21880.40"))
    f = d.findings[0]
    assert (f.symptom, f.rule) == ("low_gpu_util", "low_gpu_util.optimizer_bound")
    assert f.facts["optimizer_share_pct"] == 94.6
    assert f.steps[0].id == "low_gpu_util.optimizer_offload"


def test_an_ordinary_optimizer_step_stays_quiet(run):
    assert run(_ds_timers("120.40")).findings == []
