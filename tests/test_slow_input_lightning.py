"""slow_input from Lightning's SimpleProfiler report (issue 15): the batch fetch's total against the training epochs',
or the row's own share of the profiled time when the epoch row is not in the paste; near-misses stay quiet."""

import pytest

from conftest import corpus_texts

CASES = corpus_texts("wave9")


def _table(fetch_total: float, epoch_total: float | None) -> str:
    rows = [f"|  run_training_epoch                         \t|  {epoch_total}\t|  1\t|  {epoch_total}\t|  95.0\t|"] \
        if epoch_total else []
    rows.append(f"|  [_TrainingEpochLoop].train_dataloader_next \t|  0.1\t|  100\t|  {fetch_total}\t|  30.0\t|")
    return "FIT Profiler Report\n" + "\n".join(rows)


@pytest.mark.parametrize("fetch,fires", [(25.0, False), (25.1, True)])
def test_share_of_the_epoch_threshold(run, fetch, fires):
    got = [(f.rule, f.facts["input_share_pct"]) for f in run(_table(fetch, 100.0)).findings]
    assert got == ([("slow_input.lightning_profiler", 25.1)] if fires else [])


def test_without_the_epoch_row_the_percentage_column_is_used(run):
    assert run(_table(10.0, None)).findings[0].facts["input_share_pct"] == 30.0
    f = run(CASES["w9-lightning-no-epoch-row"]).findings[0]
    assert f.facts["input_share_pct"] == 48.1


def test_old_lightning_plain_table(run):
    f = run(CASES["w9-lightning-old-get-train-batch"]).findings[0]
    assert (f.facts["input_row"], f.facts["input_share_pct"]) == ("get_train_batch", 69.9)
    assert f.evidence[0].text.startswith("|  get_train_batch")


@pytest.mark.parametrize("case", ["w9-lightning-healthy", "w9-lightning-healthy-20pct"])
def test_compute_bound_reports_stay_quiet(run, case):
    assert run(CASES[case]).findings == []


def test_a_markdown_table_that_mentions_the_fetch_is_not_a_report(run):
    text = "| metric | value |\n|---|---|\n| train_dataloader_next mean | 3.32 s |\n| GPU util | 5.6 % |"
    assert run(text).findings == []


ADVANCED = """FIT Profiler Report
Profile stats for: [_TrainingEpochLoop].train_dataloader_next
         3981 function calls (3790 primitive calls) in {fetch} seconds

   Ordered by: cumulative time

   ncalls  tottime  percall  cumtime  percall filename:lineno(function)
   100/20    0.000    0.000    {fetch}    0.099 {{built-in method builtins.next}}
Profile stats for: [Strategy]SingleDeviceStrategy.training_step
         61210 function calls (50011 primitive calls) in 0.512 seconds

Profile stats for: [LightningModule]Net.optimizer_step
         20011 function calls in 0.240 seconds
"""


def test_lightnings_advanced_profiler_with_a_slow_batch_fetch_is_slow_input(run):
    d = run(ADVANCED.format(fetch="2.104"))
    f = d.findings[0]
    assert (f.symptom, f.rule) == ("slow_input", "slow_input.lightning_profiler")
    assert f.facts["input_share_pct"] == 73.7


def test_lightnings_advanced_profiler_with_a_quick_batch_fetch_stays_quiet(run):
    assert run(ADVANCED.format(fetch="0.051")).findings == []
