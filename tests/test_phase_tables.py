"""Phase tables read by what their rows mean: a profiler's rows without their header, a section timer with one
percentage a row, a profiler report of times only. Near-misses: a data phase that is a small share, a data phase
that is not the largest of a times-only table, NCCL kernels that hold little of the CUDA time."""
import pytest

PROFILER_ROWS = (
    "ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned l...         0.00%       0.000us         0.00%       "
    "0.000us       0.000us      120.400s        {ag}%      120.400s      98.110ms          1228  \n"
    "                                            aten::mm_         0.02%     140.039ms        21.75%      143.685s      "
    "10.712ms       96.664s        22.41%      140.886s      10.504ms         13413  \n"
    "ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL(ncclDevComm...         0.00%       0.000us         0.00%       "
    "0.000us       0.000us       57.233s        {rs}%       57.233s     146.008ms           392  \n")


def _first(d):
    return (d.findings[0].symptom, d.findings[0].rule) if d.findings else None


def test_headerless_profiler_rows_with_nccl_kernels_on_top_are_slow_comm(run):
    d = run(PROFILER_ROWS.format(ag="31.20", rs="13.05"))
    assert _first(d) == ("slow_comm", "slow_comm.profiler")
    assert d.findings[0].facts["comm_share_pct"] == 44.25
    assert d.findings[0].facts["top_kernel"].startswith("ncclDevKernel_AllGather")


def test_headerless_profiler_rows_with_a_small_nccl_share_stay_quiet(run):
    assert run(PROFILER_ROWS.format(ag="21.20", rs="9.05")).findings == []


SECTIONS = """Section                           Time     % of total
Setup                             0.91          1.83%
Training                         48.70         98.17%
  Epoch                          48.10         96.96%
    {name}                  {t:>8}         {p}%
    Forward and backward          {fb:>5}          {fbp}%
    Logging                        0.88          1.77%
"""


def test_a_section_timer_with_data_reading_most_of_the_epoch_is_slow_input(run):
    d = run(SECTIONS.format(name="Read data  ", t="40.12", p="80.87", fb="6.10", fbp="12.30"))
    assert _first(d) == ("slow_input", "slow_input.phase_table")
    assert d.findings[0].facts == {"input_share_pct": 80.87, "input_row": "Read data"}


def test_a_section_timer_with_a_small_data_share_stays_quiet(run):
    assert run(SECTIONS.format(name="Read data  ", t="4.12", p="8.30", fb="42.10", fbp="84.87")).findings == []


TIMES_ONLY = """Profiler Report

Action              \t|  Mean duration (s)\t|  Total time (s)
-----------------------------------------------------------------
on_train_start      \t|  0.0            \t|  0.0
get_train_batch     \t|  {g:<6}         \t|  {gt}
model_forward       \t|  0.2010         \t|  1.005
model_backward      \t|  0.1988         \t|  0.994
optimizer_step      \t|  0.1902         \t|  0.951
"""


def test_a_times_only_profiler_report_led_by_the_batch_fetch_is_slow_input(run):
    d = run(TIMES_ONLY.format(g="0.6120", gt="3.060"))
    assert _first(d) == ("slow_input", "slow_input.phase_table")
    assert d.findings[0].facts["input_share_pct"] == 50.9


def test_a_times_only_report_whose_batch_fetch_is_not_the_largest_phase_stays_quiet(run):
    assert run(TIMES_ONLY.format(g="0.1950", gt="0.975")).findings == []


def test_a_times_only_report_with_exponent_cells_is_read_whole(run):
    # "1.8537e-05" is a number: the table goes on past it, and the batch fetch is then a small share
    text = ("Action   |  Mean duration (s)  |  Total time (s)\n"
            "on_train_start   |  3.0016   |  3.0016\non_epoch_start   |  2.0003   |  2.0003\n"
            "get_train_batch  |  0.0094   |  28.329\non_batch_start   |  1.8537e-05   |  0.0556\n"
            "model_forward    |  0.0376   |  112.83\nmodel_backward   |  0.0258   |  77.455\n"
            "optimizer_step   |  0.0247   |  74.201\n")
    assert run(text).findings == []


def test_a_table_cut_after_the_batch_fetch_shares_nothing(run):
    text = ("Action   |  Mean duration (s)  |  Total time (s)\n"
            "on_train_start   |  0.0016   |  0.0016\non_epoch_start   |  0.0003   |  0.0003\n"
            "get_train_batch  |  0.0094   |  28.329\n")
    assert run(text).findings == []


CPU_PROFILE = """-------------------------------------------------------  ------------  ------------  ------------  ------------  ------------  ------------
                                                   Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg    # of Calls
-------------------------------------------------------  ------------  ------------  ------------  ------------  ------------  ------------
                                        gloo:all_reduce         0.00%       0.000us             0        {ar}      85.585ms            16
                                               aten::mm        56.53%        1.285s        56.55%        1.285s      32.131ms            40
                                            aten::addmm        13.77%     313.030ms        13.81%     313.929ms      13.080ms            24
-------------------------------------------------------  ------------  ------------  ------------  ------------  ------------  ------------
Self CPU time total: 2.273s
"""


def test_a_cpu_only_profile_held_by_gloo_collectives_is_slow_comm_with_gloo_advice(run):
    d = run(CPU_PROFILE.format(ar="1.369s"))
    f = d.findings[0]
    assert (f.symptom, f.rule, f.facts["comm_share_pct"]) == ("slow_comm", "slow_comm.cpu_profile", 60.23)
    assert [s.id for s in f.steps] == ["slow_comm.gloo_share"]   # no NCCL variables, no fabric tests for gloo


def test_a_cpu_only_profile_with_small_collectives_stays_quiet(run):
    assert run(CPU_PROFILE.format(ar="201.4ms")).findings == []
