"""Defects a review of the new readers found, each pinned: odd numbers never switch a reader off, a rule for short
pastes stays out of long logs and one-off lines, counts are not times, a small phase is no straggler, units count,
and a start-up timing summary is not a step's phases."""


def _symptoms(d):
    return [f.symptom for f in d.findings]


WATCHDOG = ("[rank3]:[E ProcessGroupNCCL.cpp:563] [Rank 3] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=1205, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 "
            "milliseconds before timing out.\n")


def test_a_five_thousand_digit_number_does_not_switch_the_hang_reader_off(run):
    d = run("Timed out waiting " + "9" * 5000 + "ms for recv operation to complete\n" + WATCHDOG)
    assert _symptoms(d)[:1] == ["nccl_timeout"]


def test_huge_step_numbers_are_no_crash(run):
    d = run("[rank0] step " + "9" * 5000 + " | fwd_bwd 493.4 ms\niter: " + "9" * 5000 + " data_time: 0.5 time: 0.6\n")
    assert d.findings == [] or all(f.symptom for f in d.findings)


def test_one_validation_line_in_a_long_log_is_not_a_short_paste(run):
    text = "".join(f"{{'loss': {2.0 - i / 1000:.4f}, 'learning_rate': 2e-05, 'epoch': {i / 300:.3f}}}\n" for i in range(300))
    text += "Epoch(val) [1][10/10]  eta: 0:00:00  time: 0.5012  data_time: 0.4511\n"
    assert "slow_input" not in _symptoms(run(text))


def test_a_one_off_preprocessing_line_is_not_a_step(run):
    assert run("Preprocessing done. data: 45.2 s, total time: 50.1 s\n").findings == []


def test_counts_per_class_are_not_times(run):
    assert run("num_samples per class: {0: 5000, 1: 5200, 2: 12000, 3: 4900}\n").findings == []


def test_a_ranks_logging_phase_of_a_few_ms_is_no_straggler(run):
    text = "".join(f"[rank{r}] step {s} | fwd_bwd 480.{r} ms | log {3.1 if r == 0 else 0.2} ms\n"
                   for s in (1, 2, 3, 4) for r in range(4))
    assert run(text).findings == []


def test_a_data_time_over_prefetching_peers_is_no_straggler(run):
    text = "     rank   data_time   step_time\n" + "".join(
        f"      {r}       {d:.2f}      0.400\n" for r, d in enumerate([0.00, 0.00, 0.00, 0.06]))
    assert run(text).findings == []


def test_a_start_up_timing_summary_is_not_a_step_profile(run):
    text = "Startup timings:\n  data_loading    45.2 s\n  model_init      12.3 s\n  compile         30.1 s\n"
    assert run(text).findings == []


def test_units_count_in_a_times_only_table(run):
    text = ("Phase timings\n  data_loading      450.0 ms\n  forward            35.1 ms\n  backward           70.3 ms\n"
            "  optimizer_step      1.2 s\n")
    assert "slow_input" not in _symptoms(run(text))   # 450 ms of 1.76 s: a quarter, not 81%


def test_hfs_end_of_training_summary_is_not_a_point_on_the_curve(run):
    text = "".join(f"{{'loss': {v}, 'grad_norm': 0.9, 'learning_rate': 1e-05, 'epoch': {i / 10}}}\n"
                   for i, v in enumerate([4.1, 3.6, 3.1, 2.7, 2.4, 2.2, 2.1, 2.0, 2.01, 2.014], start=1))
    text += "{'train_runtime': 812.3, 'train_samples_per_second': 9.8, 'train_loss': 3.179, 'epoch': 1.0}\n"
    assert "loss_spike" not in _symptoms(run(text))
