"""Message generations of failures already covered, in the wordings other programs and versions print: gloo's
collective timeout, Paddle's GPU out-of-memory, the driver's reset-required assertion, fairseq's loss-scale lines,
and data/step time pairs in more trainers' spellings, judged on short pastes too. Near-misses stay quiet."""
import json

import pytest


def _first(d):
    return (d.findings[0].symptom, d.findings[0].rule) if d.findings else None


GLOO = ("[rank1]:   File \"/opt/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py\", line 4556, "
        "in barrier\n[rank1]:     work.wait()\n[rank1]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/"
        "unbound_buffer.cc:81] Timed out waiting 600000ms for recv operation to complete\n")


def test_a_gloo_collective_timeout_is_a_peer_wait_without_nccl_advice(run):
    d = run(GLOO)
    f = d.findings[0]
    assert (f.symptom, f.rule) == ("nccl_timeout", "nccl_timeout.peer_wait")
    assert f.facts["timeout_ms"] == 600000 and f.facts["reporting_ranks"] == [1]
    text = json.dumps(d.to_json_dict())
    assert "NCCL_DEBUG" not in text and "TORCH_NCCL_TRACE_BUFFER_SIZE" not in text   # no-ops on gloo


def test_pddles_gpu_out_of_memory_is_an_oom(run):
    d = run("W0811 10:12:50.697477 31331 operator.cc:242] mul raises an exception paddle::memory::allocation::BadAlloc, "
            "ResourceExhaustedError: \n\nOut of memory error on GPU 1. Cannot allocate 210.5MB memory on GPU 1, "
            "10.6GB memory has been allocated and available memory is only 88.2MB.\n")
    assert _first(d)[0] == "cuda_oom"


def test_host_memory_out_of_memory_is_not_a_gpu_oom(run):
    assert run("MemoryError: Out of memory error while reading the index file\n").findings == []


def test_the_drivers_reset_required_assertion_is_a_gpu_fault(run):
    d = run("[412871.354096] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required [NV_ERR_RESET_REQUIRED] "
            "(0x00000062) returned from status @ kernel_channel.c:2827\n")
    assert _first(d)[0] == "gpu_xid"


FAIRSEQ = """2021-04-02 10:39:44 | INFO | train_inner | epoch 003:      5 / 356 loss=9.44, gnorm=156.036, loss_scale=0.5, wall=9877
2021-04-02 10:41:18 | INFO | fairseq.trainer | NOTE: overflow detected, setting loss scale to: {a}
2021-04-02 10:48:04 | INFO | fairseq.trainer | NOTE: overflow detected, setting loss scale to: {b}
"""


def test_fairseqs_overflow_lines_driving_the_scale_down_are_a_collapse(run):
    d = run(FAIRSEQ.format(a="0.00048828125", b="0.000244140625"))
    f = d.findings[0]
    assert (f.symptom, f.rule) == ("loss_nan", "loss_nan.scale_collapse")
    assert f.facts["min_loss_scale"] == 0.000244140625


def test_fairseqs_early_overflows_at_a_high_scale_are_normal(run):
    assert run(FAIRSEQ.format(a="64.0", b="32.0")).findings == []


def test_fairseqs_minimum_loss_scale_message_is_a_collapse(run):
    text = "FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding.\n"
    assert _first(run(text)) == ("loss_nan", "loss_nan.scale_collapse")


PADDLE = ("[2021/07/01 09:52:{s:02d}] root INFO: epoch: [3/500], iter: {i}, lr: 0.001000, loss: 2.81, reader_cost: {r} s, "
          "batch_cost: {b} s, samples: 512, ips: 198.8\n")


def test_paddles_reader_cost_against_batch_cost_is_an_input_share(run):
    text = "".join(PADDLE.format(s=i, i=1200 + 10 * i, r="2.33420", b="2.57432") for i in range(4))
    f = run(text).findings[0]
    assert (f.symptom, f.rule) == ("slow_input", "slow_input.step_timing")
    assert f.facts["input_share_pct"] == pytest.approx(90.7, abs=0.1)


@pytest.mark.parametrize("lines, fires", [
    ([("2.30", "2.57")], True),                     # one mid-run step, 90% waiting on data
    ([("0.73", "1.61"), ("0.97", "1.67")], True),   # two steps, over half
    ([("0.33", "1.61"), ("0.37", "1.67")], False),  # two steps, about a fifth: not from two points
])
def test_short_pastes_are_judged_with_a_higher_bar(run, lines, fires):
    text = "".join(PADDLE.format(s=i, i=1200 + 10 * i, r=r, b=b) for i, (r, b) in enumerate(lines))
    assert (_first(run(text)) == ("slow_input", "slow_input.step_timing")) is fires


def test_a_runs_first_step_waiting_on_data_is_warm_up(run):
    text = PADDLE.format(s=0, i=1, r="83.80902", b="89.17556") + PADDLE.format(s=5, i=2, r="0.00154", b="2.27765")
    assert run(text).findings == []


def test_torch_elastics_rendezvous_timeout_is_a_store_timeout(run):
    text = ('  File "/opt/venv/lib/python3.12/site-packages/torch/distributed/elastic/rendezvous/dynamic_rendezvous.py", '
            'line 680, in run\n    raise RendezvousTimeoutError\ntorch.distributed.elastic.rendezvous.api.'
            'RendezvousTimeoutError\n')
    assert _first(run(text)) == ("nccl_timeout", "nccl_timeout.store")


def test_paddles_nccl_error_with_its_code_is_an_nccl_error(run):
    text = ("    task = group.process_group.barrier()\nOSError: (External) NCCL error(2), unhandled system error.\n"
            "  [Hint: Please search for the error code(2) on website (https://docs.nvidia.com/deeplearning/nccl/)]\n")
    assert _first(run(text)) == ("nccl_error", "nccl_error.code")


def test_glooss_connection_reset_is_the_peers_connection(run):
    text = ("[rank0]: RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:545] Read error "
            "[10.1.0.4]:31377: Connection reset by peer. This is typically caused by a remote worker hanging or bugs in "
            "the application.\n")
    assert _first(run(text)) == ("nccl_error", "nccl_error.remote")


def test_a_reset_connection_elsewhere_in_the_app_is_not_an_nccl_error(run):
    assert run("requests.exceptions.ConnectionError: ('Connection aborted.', ConnectionResetError(104, "
               "'Connection reset by peer'))\n").findings == []


AVG = "Epoch: [3][{i}/5005]\tTime {t} ({ta})\tData {d} ({da})\tLoss {l} ({la})\tPrec@1 6.250 (1.374)\n"


def test_averagemeter_running_averages_give_the_input_share(run):
    text = "".join(AVG.format(i=1200 + 10 * k, t=t, ta="2.650", d=d, da="2.391", l="5.61", la="6.37")
                   for k, (t, d) in enumerate([("1.599", "1.296"), ("0.238", "0.001"), ("2.700", "2.383")]))
    f = run(text).findings[0]
    assert (f.symptom, f.rule) == ("slow_input", "slow_input.step_timing")
    assert f.facts == {"input_share_pct": 90.2, "steps_read": 1220}


def test_averagemeter_lines_with_a_small_data_average_stay_quiet(run):
    # per-batch losses swing with batch length (3.2 .. 14.9) while the running average falls: no spike either
    text = "".join(AVG.format(i=k, t="0.800", ta="1.200", d="0.002", da="0.004", l=l, la=f"{37.09 - 0.07 * k:.4f}")
                   for k, l in enumerate(["3.2168", "3.6915", "3.8567", "1.9861", "4.2020", "10.1045", "10.0306",
                                          "12.3729", "8.1055", "5.7821", "13.5125", "8.8798", "14.8824"], start=11))
    assert run(text).findings == []


def test_per_rank_step_lines_with_a_data_phase_give_the_input_share(run):
    text = "".join(f"(RayTrainWorker pid=8248) [rank 0] step {s}/60 loss 2.29 step_time 151.5 ms (data 139.1 ms, fwd 2.6 "
                   f"ms, bwd+allreduce 9.8 ms) 211.2 samples/s\n" for s in (10, 20, 30, 40))
    f = run(text).findings[0]
    assert (f.symptom, f.rule) == ("slow_input", "slow_input.step_timing")
    assert f.facts["input_share_pct"] == pytest.approx(91.8, abs=0.1)


def test_paddle_hapis_average_reader_cost_beside_its_compute_only_batch_cost(run):
    text = "".join(f"step {s}/50 - loss: 4.2 - avg_reader_cost: 0.0800{s % 9} sec - avg_batch_cost: 0.00399 sec - ips: 187.4 "
                   f"samples/sec - 85ms/step\n" for s in (10, 20, 30, 40))
    f = run(text).findings[0]
    assert (f.symptom, f.rule) == ("slow_input", "slow_input.step_timing") and f.facts["input_share_pct"] > 90


def test_a_loaders_own_time_in_its_workers_is_no_wait(run):
    text = "".join(f"Training Epoch: [1]  [{i:>4}/1412]  iter_time: 0.645(0.645)  data_wait_time: 0.000(0.000)  "
                   f"data_load_time: 8.745(8.745)  loss: 1.46 (1.47)\n" for i in range(1, 5))
    assert run(text).findings == []


def test_horovods_stall_inspector_warning_alone_is_advisory(run):
    # Horovod warns after 60 s and goes on unless HOROVOD_STALL_SHUTDOWN_TIME_SECONDS is set: no critical timeout
    text = ("WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and "
            "are waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are "
            "trying to submit different tensors.\nStalled ops:\nHorovodAllreduce_grads_0 [missing ranks: 17]\n")
    assert run(text).findings == []


@pytest.mark.parametrize("line", [
    "[rank0]: RuntimeError: NCCL Error 2: unhandled system error (run with NCCL_DEBUG=INFO for details)",
    "ExternalError:  Nccl error, unhandled cuda error  (at /paddle/paddle/fluid/platform/collective_helper.cc:83)",
])
def test_nccl_result_codes_in_other_wordings(run, line):
    assert _first(run(line + "\n")) == ("nccl_error", "nccl_error.code")


TIMM = ("Train: 2 [   {i}/4 ({p:>3}%)]  Loss: 1.70 (2.01)  Time: 3.632s,    4.40/s  ({ta}s,    4.68/s)  LR: 1.250e-02  "
        "Data: 1.129 ({da})\n")


@pytest.mark.parametrize("da, fires", [("1.851", True), ("0.412", False)])
def test_timms_running_averages_over_a_few_steps_count_from_half(run, da, fires):
    text = "".join(TIMM.format(i=i, p=25 * (i + 1), ta="3.421", da=da) for i in range(4))
    assert (_first(run(text)) == ("slow_input", "slow_input.step_timing")) is fires


CPROFILE = """         2849479 function calls (2809978 primitive calls) in 118.110 seconds

   Ordered by: cumulative time

   ncalls  tottime  percall  cumtime  percall filename:lineno(function)
        1    0.012    0.012  118.162  118.162 train.py:1(<module>)
       51    0.002    0.000   {cum}    1.919 dataloader.py:720(__next__)
      768    0.388    0.001   {cum}    0.127 train.py:6(__getitem__)
     9216   86.448    0.009   86.448    0.009 {{built-in method torch._C._nn.avg_pool2d}}
"""


def test_a_cprofiled_run_waiting_on_its_batches_is_slow_input(run):
    f = run(CPROFILE.format(cum="97.850")).findings[0]
    assert (f.symptom, f.rule, f.facts["input_share_pct"]) == ("slow_input", "slow_input.phase_table", 82.8)


def test_a_cprofiled_run_with_a_quick_loader_stays_quiet(run):
    assert run(CPROFILE.format(cum="4.850")).findings == []


def test_lightnings_advanced_profiler_sections_are_not_a_whole_run(run):
    text = ("Profile stats for: [_TrainingEpochLoop].train_dataloader_next\n" + CPROFILE.format(cum="97.850")
            + "Profile stats for: [Strategy]SingleDeviceStrategy.training_step\n"
            "         68226 function calls (56050 primitive calls) in 900.0 seconds\n")
    assert run(text).findings == []   # 118 s of fetching against 900 s of training steps: its reader's call, 11.6%
