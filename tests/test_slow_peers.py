"""Stragglers from values peers report side by side: a peer -> time map on one line, a table whose first column is
the peer, and the same line printed by every worker at one step. Near-misses: peers that agree, half of them slow
(no single straggler), one worker's series over time, a tqdm bar."""


def _first(d):
    return (d.findings[0].symptom, d.findings[0].rule) if d.findings else None


def test_a_peer_to_time_map_with_one_slow_node(run):
    d = run("check 0: elapsed per node {0: 19.8, 1: 20.4, 2: 141.2, 3: 20.1}\n")
    assert _first(d) == ("straggler", "straggler.peer_values")
    assert "node(s) 2" in d.findings[0].title and d.findings[0].facts["slow_nodes"] == [2]
    assert d.findings[0].steps[0].id == "straggler.drain_and_test" and "node(s) 2" in d.findings[0].steps[0].text


def test_a_peer_map_that_agrees_stays_quiet(run):
    assert run("check 0: elapsed per node {0: 19.8, 1: 20.4, 2: 21.2, 3: 20.1}\n").findings == []


def test_half_of_the_peers_slow_is_not_one_straggler(run):
    assert run("round 2: node elapsed time {0: 19.8, 1: 60.4, 2: 61.2, 3: 20.1}\n").findings == []


TABLE = """slowest ranks at step 88:
     rank   data_time   step_time
      {a}     {x}      51.220
       12       0.031     388.010
       13       0.027     388.100
       14       0.022     388.020
       15       0.019     388.040
"""


def test_a_rank_table_with_one_rank_far_behind_names_it(run):
    d = run(TABLE.format(a=" 9", x="301.400"))
    f = d.findings[0]
    assert (f.symptom, f.rule) == ("straggler", "straggler.peer_values")
    assert f.facts["slow_ranks"] == [9] and f.facts["metric"] == "data_time"


def test_a_rank_table_whose_ranks_agree_stays_quiet(run):
    assert run(TABLE.format(a=" 9", x="  0.030")).findings == []


RATES = """Epoch[1] Batch [300]\tSpeed: 2211.40 samples/sec\tacc=0.93
Epoch[1] Batch [300]\tSpeed: 2208.95 samples/sec\tacc=0.94
Epoch[1] Batch [300]\tSpeed: {slow} samples/sec\tacc=0.93
Epoch[1] Batch [300]\tSpeed: 2216.02 samples/sec\tacc=0.93
"""


def test_one_worker_slower_at_the_same_step_is_a_straggler(run):
    assert _first(run(RATES.format(slow="1402.33"))) == ("straggler", "straggler.peer_values")


def test_workers_within_a_few_percent_stay_quiet(run):
    assert run(RATES.format(slow="2051.10")).findings == []


def test_one_workers_throughput_over_time_is_not_a_peer_comparison(run):
    # no step numbers to line the values up by: a series of one process (a slowdown, perhaps, not a straggler)
    text = "".join(f"throughput: {v} samples/sec\n" for v in (2210.5, 2208.1, 1402.3, 2215.0))
    assert run(text).findings == []


def _rank_lines(fwd, comm):
    """Per-rank step lines: fwd[rank] is the compute time every step (plus a little jitter), comm the wait."""
    out = []
    for step in (6, 12, 18, 24):
        for rank in (1, 0, 3, 2):
            f = fwd[rank] + (step % 5) * 3.1
            out.append(f"[rank{rank}] step {step:>3} | loss 2.30 | fwd_bwd {f:7.1f} ms | allreduce {comm[rank]:6.1f} ms | "
                       f"step {f + comm[rank]:7.1f} ms\n")
    return "".join(out)


def test_a_rank_whose_compute_phase_is_slow_at_every_step_is_named(run):
    d = run(_rank_lines({0: 281.0, 1: 290.2, 2: 276.4, 3: 512.9}, {0: 240.0, 1: 230.5, 2: 250.1, 3: 20.2}))
    f = d.findings[0]
    assert (f.rule, f.facts["slow_ranks"], f.facts["metric"]) == ("straggler.peer_values", [3], "fwd_bwd")


def test_jitter_in_the_time_ranks_wait_for_each_other_names_no_straggler(run):
    # rank 2 waits twice as long in the all-reduce: waiting is the peers' symptom, not the straggler's
    assert run(_rank_lines({0: 331.0, 1: 340.2, 2: 326.4, 3: 335.9}, {0: 40.0, 1: 35.5, 2: 84.1, 3: 30.2})).findings == []


def test_two_ranks_one_computing_several_times_longer_every_step(run):
    text = "".join(f"(RayTrainWorker pid={4000 + r}) [rank {r}] step {s}/60 loss 2.31 step_time 91.0 ms (data 0.8 ms, "
                   f"fwd {83.0 if r else 2.4 + s / 100:.1f} ms, bwd+allreduce {7.1 if r else 80.3:.1f} ms)\n"
                   for s in (10, 20, 30, 40) for r in (0, 1))
    f = run(text).findings[0]
    assert (f.rule, f.facts["slow_ranks"], f.facts["metric"]) == ("straggler.peer_values", [1], "fwd")


def test_a_rank_slow_at_half_the_steps_is_jitter(run):
    lines = []
    for step, slow in ((5, True), (10, False), (15, True), (20, False)):
        for rank, base in ((0, 5.1), (1, 4.9), (2, 5.0)):
            fwd = 16.6 if (rank == 1 and slow) else base
            lines.append(f"[rank{rank}] iter {step:>3} loss 2.31 data+fwd {fwd} ms | bwd+allreduce 40.2 ms\n")
    assert run("".join(lines)).findings == []


def test_a_scripts_own_process_label_names_the_straggler(run):
    text = "".join(f"[process {p}/2] step {s:>3} loss=2.34 compute={151.6 if p else 0.9:>7.1f}ms "
                   f"backward+sync={4.4 if p else 157.4:>7.1f}ms step=  160.6ms/it\n" for s in (8, 16, 24, 32) for p in (1, 0))
    f = run(text).findings[0]
    assert (f.rule, f.facts["slow_ranks"], f.facts["metric"]) == ("straggler.peer_values", [1], "compute")
