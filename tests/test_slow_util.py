"""low_gpu_util (issue 15): MFU and TFLOP/s lines of several trainers and nvidia-smi samples; the near-misses —
an idle GPU, a healthy MFU, a small model on a GPU the log does not name, too few samples — stay quiet."""
import pytest

TITAN = "[rank0]:[titan] - root - INFO - step: {i}  loss:  8.4  memory: 44.90GiB(56.70%)  tps: 1,211  tflops: {tf}  mfu: {m}%"
MEGATRON = (" iteration {i}/ 20000 | elapsed time per iteration (ms): 11201.7 | throughput per GPU (TFLOP/s/GPU): {tf} |"
            " lm loss: 6.9E+00 |")
DMON = ("# gpu    pwr  gtemp  mtemp     sm    mem    enc    dec   mclk   pclk\n"
        "# Idx      W      C      C      %      %      %      %    MHz    MHz\n")


def _lines(fmt, values, **kw):
    return "\n".join(fmt.format(i=i * 10, **{k: v[n] for k, v in kw.items()}, tf=values[n], m=values[n])
                     for n, i in enumerate(range(1, len(values) + 1))) + "\n"


@pytest.mark.parametrize("text,facts", [
    (_lines(TITAN, [1.9, 7.2, 7.3, 7.1]), {"mfu_pct": 7.2, "readings": 3}),
    ("iter 0: loss 10.98, time 21830.40ms, mfu -100.00%\niter 10: loss 9.81, time 1402.11ms, mfu 7.62%\n"
     "iter 20: loss 9.14, time 1398.76ms, mfu 7.63%\n", {"mfu_pct": 7.62}),
    ("\n".join(f"[batch={b}/4800]:\n\t Train throughput/device/mfu: 0.09{b % 7}" for b in (100, 110, 120)) + "\n",
     {"readings": 2}),
    ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-1)\n" + _lines(MEGATRON, [139.8, 140.1, 139.9]),
     {"tflops_per_gpu": 140.0, "gpu_model": "H100", "peak_tflops": 989.0}),
    (_lines(MEGATRON, [20.1, 20.0, 20.1]), {"peak_tflops": 312.0}),      # unnamed GPU, far below any datacenter peak
    ("x NCCL INFO NET/OFI Running on p4d.24xlarge platform\n" + _lines(MEGATRON, [60.2, 61.0, 60.7]),
     {"gpu_model": "A100"}),                                              # the instance names the GPU
])
def test_low_mfu_fires_with_its_facts(run, text, facts):
    f = run(text).findings[0]
    assert (f.symptom, f.rule) == ("low_gpu_util", "low_gpu_util.mfu")
    assert {k: f.facts[k] for k in facts} == facts


def test_low_sm_util_from_dmon_and_csv(run):
    dmon = run(DMON + "".join(f"    {g}    180     41     48     {u}      9      0      0   2619   1980\n"
                              for g, u in ((0, 27), (1, 31), (0, 22), (1, 38))))
    csv = run("index, utilization.gpu [%], memory.used [MiB]\n0, 34 %, 71204 MiB\n1, 29 %, 71188 MiB\n"
              "0, 41 %, 71204 MiB\n")
    assert dmon.findings[0].facts == {"util_pct": 29.0, "samples": 4, "gpus": 2}
    assert csv.findings[0].facts["util_pct"] == 34.0 and csv.findings[0].rule == "low_gpu_util.samples"


QUIET = [
    _lines(TITAN, [40.8, 41.1, 41.3]),                                   # healthy MFU
    _lines(MEGATRON, [0.0, 61.2, 61.9, 61.8]),                           # small model, GPU not named: no verdict
    DMON + "    0     43     48     45      0      1      0      0   3505    936\n" * 4,   # idle GPU: every SM 0
    DMON + "    0    611     58     66     99     61      0      0   2619   1980\n" * 4,   # busy
    DMON + "    0    180     41     48     27      9      0      0   2619   1980\n" * 2,   # two samples only
    "iter 10: loss 9.81, time 1402.11ms, mfu 7.62%\n",                  # one reading
    "We reached 41% MFU: see https://example.org/mfu-notes\n",          # prose
]


@pytest.mark.parametrize("text", QUIET, ids=[f"quiet-{i}" for i in range(len(QUIET))])
def test_near_misses_stay_quiet(run, text):
    assert [f.symptom for f in run(text).findings] == []


DCGM_HEAD = "#Entity   SMACT        SMOCC        TENSO\nID\n"


@pytest.mark.parametrize("level,fires", [(0.499, True), (0.50, False)])
def test_dcgm_sm_activity_is_judged_against_half(run, level, fires):
    rows = "".join(f"GPU {g}     {level:.3f}        0.100        0.050\n" for g in range(4))
    found = run(DCGM_HEAD + rows).findings
    assert bool(found) is fires
    if fires:
        f = found[0]
        assert (f.rule, f.facts["util_pct"], f.facts["gpus"]) == ("low_gpu_util.samples", 49.9, 4)
        assert f.title.startswith("DCGM SM activity is 49.9%")


def test_dcgm_unsampled_rows_and_an_idle_node(run):
    rows = "GPU 0     N/A          N/A          N/A\n" + "".join(f"GPU {g}     0.120        0.0   0.0\n" for g in (1, 2, 3))
    assert run(DCGM_HEAD + rows).findings[0].facts["samples"] == 3
    idle = "".join(f"GPU {g}     0.000        0.000        0.000\n" for g in range(8))
    assert run(DCGM_HEAD + idle).findings == []   # no job running, not an underused one


def test_megatron_deepspeed_tflops_per_gpu(run):
    line = (" iteration {i}/ 1000 | elapsed time per iteration (ms): 9100.0 | samples per second: 56.2 | "
            "TFLOPs: {tf} |")
    named = "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-2)\n" + _lines(line, [11.0, 38.1, 37.9, 38.0])
    f = run(named).findings[0]
    assert (f.facts["tflops_per_gpu"], f.facts["gpu_model"]) == (38.0, "A100")
    # the same figures on an unnamed GPU are not low enough to say anything (8% of the A100 peak is 25 TFLOP/s)
    assert run(_lines(line, [11.0, 38.1, 37.9, 38.0])).findings == []


def test_a_repeated_header_does_not_count_its_rows_twice(run):
    # dcgmi dmon prints its header again every 14 rows; nvidia-smi dmon every screenful
    block = DCGM_HEAD + "".join(f"GPU {g}     0.200        0.0   0.0\n" for g in range(7))
    assert run(block * 3).findings[0].facts["samples"] == 21
    rows = "".join(f"    {g}    300     40      -     35     20      0      0   2619   1980\n" for g in range(4))
    assert run((DMON + rows) * 3).findings[0].facts["samples"] == 12


def _smi_rows(utils, watts=(70, 205), mib=6110):
    return "".join(f"| N/A   45C    P0   {watts[u > 0]}W / 300W |   {mib:>4}MiB / 32510MiB |     {u}%      Default |\n"
                   for u in utils)


def test_nvidia_smi_table_rows_sampled_over_time_are_utilisation_samples(run):
    d = run("nvidia-smi -l 1 | grep MiB\n" + _smi_rows([0, 35, 0, 91, 0, 28, 0, 0, 88, 0]))
    f = d.findings[0]
    assert (f.symptom, f.rule) == ("low_gpu_util", "low_gpu_util.samples")
    assert f.facts["samples"] == 10 and f.facts["util_pct"] == 0.0   # the median of ten samples, six of them idle


def test_busy_nvidia_smi_rows_stay_quiet(run):
    assert run(_smi_rows([97, 99, 100, 96, 98])).findings == []


def _snapshot(utils, mib):
    return "".join(f"|   {i}  Tesla V100-SXM2-32GB        On   | 00000000:1{i}:00.0 Off |                    0 |\n"
                   + _smi_rows([u], mib=mib if u == 0 else 6110) for i, u in enumerate(utils))


def test_one_nvidia_smi_snapshot_of_each_gpu_is_not_a_utilisation_series(run):
    # idle GPUs that hold no memory are not part of the job: nothing to say about one instant
    assert run(_snapshot([0, 0, 100, 0], mib=3)).findings == []
    assert run(_snapshot([0, 0, 0, 0], mib=3)).findings == []


def test_a_snapshot_where_every_gpu_holds_memory_but_idles_is_no_evidence(run):
    # a loaded model waiting for requests looks the same: one instant cannot tell
    assert run(_snapshot([0, 0, 0, 0], mib=1685)).findings == []


def test_a_snapshot_with_gpus_holding_memory_but_idle_beside_a_busy_one(run):
    d = run(_snapshot([0, 0, 100, 0], mib=4770))
    f = d.findings[0]
    assert (f.symptom, f.rule) == ("low_gpu_util", "low_gpu_util.idle_gpus")
    assert "GPU(s) 0, 1, 3" in f.title and f.facts["gpus"] == 4


def test_a_snapshot_with_one_gpu_between_kernels_among_busy_ones_stays_quiet(run):
    assert run(_snapshot([97, 0, 100, 99], mib=4770)).findings == []
