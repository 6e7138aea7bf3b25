"""What blind wave 19's first look missed or flagged wrongly, each fixed as a message generation or a general rule,
tested on text of our own in the programs' wording (the wave's third-party pastes stay outside the repository)."""
from core.instances import instance_for_gpu


def _top(run, text):
    d = run(text)
    return (d.findings[0].symptom, d.findings[0].rule) if d.findings else None


def test_rocm_builds_say_hip_out_of_memory(run):
    text = ("node-3: torch.OutOfMemoryError: HIP out of memory. Tried to allocate 512.00 MiB (GPU 2; 63.98 GiB total "
            "capacity; 63.10 GiB already allocated; 0 bytes free; 63.40 GiB reserved in total by PyTorch)\n")
    assert _top(run, text) == ("cuda_oom", "cuda_oom.allocator")
    assert _top(run, "RuntimeError: HIP error: out of memory\n") == ("cuda_oom", "cuda_oom.runtime")


def test_xla_reports_a_failed_nccl_operation_with_its_result(run):
    text = ("E0301 10:00:00.000001 4242 pjrt_stream_executor_client.cc:3008] Execution of replica 0 failed: INTERNAL: "
            "NCCL operation ncclAllGather(send_buffer.opaque(), recv_buffer.opaque(), count, dtype, comm_, stream) "
            "failed: unhandled system error (run with NCCL_DEBUG=WARN for details).\n")
    d = run(text)
    assert d.findings[0].rule == "nccl_error.code" and d.findings[0].facts["error_code"] == "unhandled system error"
    # the same operation named in a success message is no error
    assert not run("NCCL operation ncclAllGather completed in 2.1 ms\n").findings


def test_aws_ofi_nccl_refusing_a_provider_other_than_efa(run):
    text = ("gpu-7:311:311 [0] ofi_init:1288 NCCL WARN NET/OFI Only EFA provider is supported\n"
            "gpu-7:311:311 [0] ofi_init:1339 NCCL WARN NET/OFI aws-ofi-nccl initialization failed\n")
    assert _top(run, text)[0] == "efa_provider_missing"


def test_gsp_firmware_timeouts_without_an_xid_line_need_a_reset(run):
    text = ("[  311.100001] NVRM: GPU2 _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 1000 heartbeat 1 "
            "heartbeatWithOffsetMs 10 diff 6001 timeout 5200\n"
            "[  371.100002] NVRM: GPU2 _kgspLogRpcTimeout: ********************** GSP Timeout **********************\n")
    f = run(text).findings[0]
    assert (f.symptom, f.rule, f.facts["action"]) == ("gpu_xid", "gpu_xid.gsp_timeout", "reset")
    assert not run("[    4.200000] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.65.06\n").findings


def test_an_op_library_built_for_another_torch_misses_its_operators(run):
    f = run("Traceback (most recent call last):\n  File \"train.py\", line 3, in <module>\n    import torchvision\n"
            "RuntimeError: operator torchvision::nms does not exist\n").findings[0]
    assert (f.rule, f.facts["library"], f.facts["missing"]) == \
        ("version_mismatch.extension_abi", "torchvision", "torchvision::nms")
    assert not run("KeyError: 'checkpoint file does not exist'\n").findings


def test_a_grace_hopper_gpu_is_not_taken_for_an_h200_instance(run):
    assert instance_for_gpu("GH200") is None and instance_for_gpu("H200") == "p5en"
    assert instance_for_gpu("GB200") == "p6e-gb200" and instance_for_gpu("H100") == "p5"
    rows = "".join(f"   {b:>10}   {b // 4:>10}     float     sum      -1   {t:8.2f}  {bw:6.2f}  {bw:6.2f}       0   "
                   f"{t:8.2f}  {bw:6.2f}  {bw:6.2f}       0\n"
                   for b, t, bw in ((33554432, 1537.6, 21.82), (67108864, 2982.4, 22.50), (134217728, 5871.1, 22.86)))
    text = ("# nccl-tests version 2.18.2 nccl-headers=23007 nccl-library=23007\n"
            "#  Rank  0 Group  0 Pid  15784 on  nid000106 device  0 [0009:01:00] NVIDIA GH200 120GB\n"
            "#  Rank  1 Group  0 Pid  24926 on  nid000109 device  0 [0009:01:00] NVIDIA GH200 120GB\n" + rows +
            "# Avg bus bandwidth    : 14.9966\n")
    assert not run(text).findings   # 22.9 GB/s over one 200 Gb/s Slingshot NIC a GPU is the line rate


def _mm(i, t, d):
    return (f"06/13 19:41:{i:02d} - mmengine - INFO - Iter(train) [{100 + 10 * i}/768]  lr: 1.9e-04  eta: 0:08:04  "
            f"time: {t:.4f}  data_time: {d:.4f}  memory: 5661  loss: 0.05\n")


def test_the_step_after_a_checkpoint_save_is_not_an_input_stall(run):
    steps = [(4.83, 4.51)] + [(0.30, 0.006)] * 9
    saved = "06/13 19:41:35 - mmengine - INFO - Saving checkpoint at 100 iterations\n"
    assert not run(saved + "".join(_mm(i, t, d) for i, (t, d) in enumerate(steps))).findings
    # the same stall with no save before it is the loader's: one long wait for data is enough
    assert run("".join(_mm(i, t, d) for i, (t, d) in enumerate(steps))).findings[0].symptom == "slow_input"
