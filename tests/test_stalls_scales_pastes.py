"""Hangs named by a barrier monitor or a stall inspector, a gradient scale printed as a value, bracketed loss
values and pastes indented as a whole: each one mechanism, tested on text of our own in the programs' wording."""


def _top(run, text):
    d = run(text)
    return (d.findings[0].symptom, d.findings[0].rule) if d.findings else None


def test_monitored_barrier_names_the_ranks_that_never_arrived(run):
    text = ("Traceback (most recent call last):\n"
            '  File "pretrain.py", line 41, in <module>\n'
            "    dist.monitored_barrier(timeout=timedelta(seconds=45), wait_all_ranks=True)\n"
            "RuntimeError: [Rank 0]: Ranks 6, 9 failed to pass monitoredBarrier in 45000 ms\n")
    f = run(text).findings[0]
    assert (f.symptom, f.rule) == ("nccl_timeout", "nccl_timeout.peer_wait")
    assert f.facts["lagging_ranks"] == [6, 9] and f.facts["timeout_ms"] == 45000
    assert "6, 9" in f.title and "monitored barrier" in f.title
    # the older single-rank wording
    f = run("RuntimeError: [Rank 0]: Rank 2 failed to pass monitoredBarrier in 1800000 ms\n").findings[0]
    assert f.facts["lagging_ranks"] == [2]


def test_a_rank_that_passed_the_monitored_barrier_points_at_rank_0_without_blaming_itself(run):
    text = ("[rank3]: RuntimeError: Rank 3 successfully reached monitoredBarrier, but received errors while waiting "
            "for send/recv from rank 0. Please check rank 0 logs for faulty rank.\n")
    f = run(text).findings[0]
    assert f.symptom == "nccl_timeout" and f.facts["lagging_ranks"] == []
    # calling the API is no hang
    assert not run("INFO using dist.monitored_barrier() before saving the checkpoint\n").findings


def test_horovod_stall_inspector_names_the_missing_rank_under_a_launcher_label(run):
    stall = ("[2024-03-02 08:00:{s}.000001: W /opt/horovod/common/stall_inspector.cc:105] One or more tensors were "
             "submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of "
             "ranks for more than 60 seconds. This may indicate that different ranks are trying to submit different "
             "tensors or that only subset of ranks is submitting tensors, which will cause deadlock. \n"
             "Stalled ranks:\n"
             "5: [DistributedAdam_Allreduce/HorovodAllreduce_grads_12_0, DistributedAdam_Allreduce/grads_13_0]\n")
    d = run(stall.format(s="10") + stall.format(s="70"))
    f = d.findings[0]
    assert (f.symptom, f.rule) == ("nccl_timeout", "nccl_timeout.stall")
    assert f.facts["lagging_ranks"] == [5] and f.facts["timeout_ms"] == 60000
    assert "named in 2 reports" in f.title
    # NCCL's flight recorder belongs to ProcessGroupNCCL, which Horovod does not use
    assert not any(c.name.startswith("TORCH_NCCL") for s in f.steps for c in s.changes)
    # one report is Horovod's advice (it warns and goes on); the same rank named again is a stuck rank
    assert run(stall.format(s="10")).findings == []
    ops = ("WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and "
           "are waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are "
           "trying to submit different tensors.\nStalled ops:\nHorovodAllreduce_grads_0 [missing ranks: 17]\n")
    f = run(ops + ops).findings[0]
    assert (f.rule, f.facts["lagging_ranks"]) == ("nccl_timeout.stall", [17])
    # the stall check's settings printed at start-up are no stall
    assert not run("HOROVOD_STALL_CHECK_TIME_SECONDS=60\nHOROVOD_STALL_SHUTDOWN_TIME_SECONDS=0\n").findings


def test_a_gradient_scale_printed_as_a_value_collapses_below_one_percent(run):
    text = ("2024-05-11 10:12:01,221 INFO [train.py:1012] (0/4) Epoch 3, batch 4200, loss[loss=0.2841, over 7311.00 "
            "frames. ], tot_loss[loss=0.2911, over 1461283.11 frames. ], batch size: 41, lr: 2.61e-02, "
            "grad_scale: 0.0078125\n"
            "2024-05-11 10:12:31,552 WARNING [train.py:1070] (0/4) Grad scale is small: 1.1920928955078125e-07\n")
    f = run(text).findings[0]
    assert (f.symptom, f.rule) == ("loss_nan", "loss_nan.scale_collapse")
    assert f.facts["min_loss_scale"] < 1e-6
    assert _top(run, "RuntimeError: grad_scale is too small, exiting: 9.5367431640625e-07\n") == (
        "loss_nan", "loss_nan.scale_collapse")


def test_healthy_scale_values_are_no_collapse(run):
    # icefall's healthy field, Megatron's bf16 'loss scale: 1.0' on every step, a DeepSpeed scale of 65536
    healthy = ("2024-05-11 10:12:01,221 INFO [train.py:1012] (0/4) Epoch 3, batch 4200, loss[loss=0.2841, over "
               "7311.00 frames. ], batch size: 41, lr: 2.61e-02, grad_scale: 4.0\n"
               " iteration      100/  500000 | consumed samples:        25600 | elapsed time per iteration (ms): "
               "812.4 | learning rate: 1.500E-04 | global batch size:   256 | lm loss: 6.512E+00 | loss scale: 1.0 "
               "| grad norm: 1.234 | number of skipped iterations:   0 | number of nan iterations:   0 |\n"
               "[2024-05-11 10:13:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] step=300, skipped=2, "
               "lr=[0.0001], mom=[(0.9, 0.95)], loss_scale=65536.0\n")
    for line in healthy.splitlines(keepends=True):
        assert run(line).findings == [], line


def test_bracketed_loss_values_are_read_as_numbers(run):
    lines = "".join(f"[2022-08-03 12:0{i}:11,212] [    INFO] - global step {i * 100}, epoch: 0, batch: {i * 100 - 1}, "
                    f"loss: [{v}], speed: 3.12 step/s\n" for i, v in enumerate(("2.3412", "2.1187", "nan", "nan"), 1))
    f = run(lines).findings[0]
    assert (f.symptom, f.facts["first_nan_iteration"], f.facts["last_finite_loss"]) == ("loss_nan", 300, 2.1187)
    healthy = lines.replace("[nan]", "[2.0312]")
    assert run(healthy).findings == []


def test_a_paste_indented_as_a_whole_reads_like_the_log(run):
    # nvidia-smi nvlink -s: a GPU line, then its links indented by a tab
    log = ("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-0a0a)\n\t Link 0: 25 GB/s\n\t Link 1: <inactive>\n"
           "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-0b0b)\n\t Link 0: <inactive>\n\t Link 1: 25 GB/s\n")
    plain = run(log).findings[0]
    for indent in ("    ", "\t", "  "):   # a Markdown list item's code block, an e-mail, a quote
        got = run("".join(indent + ln + "\n" for ln in log.splitlines())).findings
        assert got and (got[0].symptom, got[0].title) == (plain.symptom, plain.title) and plain.symptom == "nvlink_inactive"
        assert [e.text for e in got[0].evidence] == [e.text for e in plain.evidence]
    # a table indented by the program keeps its shape: only what every line shares goes
    table = ("#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
             "   1073741824     268435456     float     sum      -1   9817.1  109.37  205.08      0\n"
             "   2147483648     536870912     float     sum      -1    19501  110.12  206.48      0\n")
    assert run(table).findings == run("\t" + table.replace("\n", "\n\t")).findings


def test_xla_running_out_of_accelerator_memory_is_an_oom(run):
    text = ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of "
            "memory in memory space hbm. Used 41.20G of 15.48G hbm. Exceeded hbm capacity by 25.72G.\n")
    f = run(text).findings[0]
    assert (f.symptom, f.rule, f.facts["needed_gib"], f.facts["total_gib"]) == ("cuda_oom", "cuda_oom.xla", 41.2, 15.48)
    assert _top(run, "2024-01-01 XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
                     "8589934592 bytes.\n") == ("cuda_oom", "cuda_oom.xla")
    # a quota message with the same status word is no memory failure
    assert not run("grpc status RESOURCE_EXHAUSTED: Quota exceeded for requests per minute\n").findings


def test_a_short_jump_the_grad_norm_confirms_is_a_spike(run):
    line = ("2024-07-12 12:{m}:00 | INFO | train_inner | epoch 004:   {u} / 9000 loss={v}, nll_loss=0.7, ppl=300.1, "
            "wps=12000.0, ups=0.32, num_updates={u}, lr=0.0002, gnorm={g}, loss_scale=64, train_wall=310, wall=0\n")
    jump = line.format(m=10, u=1800, v="7.912", g="1.702") + line.format(m=15, u=1900, v="8.034", g="1.611")
    f = run(jump + line.format(m=20, u=2000, v="9.821", g="7.340")).findings[0]
    assert f.symptom == "loss_spike" and f.facts["grad_norm_at_spike"] == 7.34
    # the same loss jump with a calm grad norm is left alone on so short a paste, and so is a grad norm jump alone
    assert not run(jump + line.format(m=20, u=2000, v="9.821", g="1.905")).findings
    assert not run(jump + line.format(m=20, u=2000, v="8.101", g="7.340")).findings


NCCL_TESTS = ("#  Rank  0 Group  0 Pid  41 on  gpu-a01 device  0 [0x07] {gpu}\n"
              "#  Rank  1 Group  0 Pid  42 on  gpu-a02 device  0 [0x07] {gpu}\n"
              "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
              "    268435456      67108864     float     sum      -1    60123    4.46    {bw}      0\n"
              "    536870912     134217728     float     sum      -1   120551    4.45    {bw}      0\n")


def test_a_multi_node_ring_collective_under_any_rdma_fabric_is_slow_where_no_instance_is_named(run):
    # (an H100 or A100 alone stands for its AWS instance and that instance's EFA figure; these name none)
    d = run("    " + NCCL_TESTS.format(gpu="NVIDIA GH200 120GB", bw="4.45").replace("\n", "\n    "))
    f = d.findings[0]
    assert (f.symptom, f.facts["fabric"], f.facts["expected_gbps"]) == ("slow_comm", "unknown", 12.5)
    advice = " ".join(c.name for s in f.steps for c in s.changes)
    assert "fi_info" not in advice and "NCCL_DEBUG" in advice   # no EFA command on a fabric nobody named
    # fast enough for a 100 Gb/s fabric, or a GPU of an older generation (25 GbE clusters exist): nothing said
    assert run(NCCL_TESTS.format(gpu="AMD Instinct MI300X", bw="4.45")).findings[0].symptom == "slow_comm"
    assert not run(NCCL_TESTS.format(gpu="NVIDIA GH200 120GB", bw="11.20")).findings
    assert not run(NCCL_TESTS.format(gpu="Tesla V100-SXM2-32GB", bw="4.45")).findings
