"""Message generations and formats added from the fifth wave of real logs (tests/corpus/wave5.jsonl): each fires on
the programs' own wording, and the near-miss beside it stays quiet. The single-message cases (FIRES) run in
test_recall_layer.py beside the earlier waves'."""
import pytest

_SMI = """+------------------------------------------------------+
| NVIDIA-SMI 535.129.03   Driver Version: 535.129.03   CUDA Version: 12.2 |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
|===============================+======================+======================|
|   0  NVIDIA A100-SXM4-80GB  On | 00000000:07:00.0 Off |                    0 |
|   1  NVIDIA A100-SXM4-80GB  On | 00000000:0B:00.0 Off |                    0 |
+-------------------------------+----------------------+----------------------+"""

FIRES = [
    # TCPStore timeouts of both generations, and the older "workers joined" wording of the master's join wait
    ("nccl_timeout", "nccl_timeout.store", "torch.distributed.DistStoreError: Socket Timeout"),
    ("nccl_timeout", "nccl_timeout.store",
     "[rank0]: torch.distributed.DistStoreError: wait timeout after 300000ms, keys: /broadcast_from/0/812"),
    ("nccl_timeout", "nccl_timeout.barrier",
     "torch.distributed.DistStoreError: Timed out after 6 seconds waiting for workers. 1/2 workers joined."),
    # only the watchdog's C++ frames made it into the paste
    ("nccl_timeout", "nccl_timeout.watchdog",
     "frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
     "std::ratio<1l, 1000l> > >) + 0x1d2 (0x7f in /x/torch/lib/libtorch_cuda.so)"),
    # a one-line OOM without the space, and cuBLAS failing to create its handle (its workspace on a full GPU)
    ("cuda_oom", "cuda_oom.runtime", "RuntimeError: CUDA error:out of memory"),
    ("cuda_oom", "cuda_oom.cublas_handle",
     "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling `cublasCreate(handle)`"),
    ("cuda_oom", "cuda_oom.cublas_handle",
     "[11:02:41] src/operator/linalg_impl.h:1229: Check failed: err == CUBLAS_STATUS_SUCCESS (1 vs. 0) : "
     "Create cublas handle failed"),
    # the plugin's regattr failure and its generic registration line without a trailing period
    ("efa_mr_registration", "efa_mr_registration.other",
     "n:1:2 [3] NCCL WARN NET/OFI Couldn't register memory region with regattr. RC: -38, ERROR: Function not "
     "implemented\nn:1:2 [3] NCCL WARN NET/OFI Unable to register memory (type = 2) for device 19"),
    # a bare connection reset raised out of init_process_group
    ("nccl_error", "nccl_error.remote",
     '  File "/x/torch/distributed/distributed_c10d.py", line 611, in init_process_group\n'
     "    default_pg._set_sequence_number_for_group()\nRuntimeError: Connection reset by peer"),
    # nvidia-smi lists two GPUs, lspci counts three
    ("gpu_xid", "gpu_xid.gpu_missing",
     _SMI + "\n$ lspci | grep -i nvidia | grep -E 'VGA|3D' | wc -l\n3"),
]


def test_lost_gpu_facts_and_title(run):
    d = run(_SMI + "\n07:00.0 3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB]\n"
            "0b:00.0 3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB]\n"
            "0f:00.0 3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB]\n")
    f = d.findings[0]
    assert (f.rule, f.facts["gpus_listed"], f.facts["gpus_on_pci"]) == ("gpu_xid.gpu_missing", 2, 3)
    assert f.facts["action"] == "drain"


def test_store_wait_names_how_long(run):
    f = run("torch.distributed.DistStoreError: wait timeout after 1800000ms, keys: /default_pg/0//cuda//0\n").findings[0]
    assert f.facts["waited_s"] == 1800
    assert "1800 s" in f.title


def test_regattr_names_the_provider_it_ran_on(run):
    f = run("n:1:2 [3] NCCL INFO NET/OFI Selected Provider is verbs;ofi_rxm (found 20 nics)\n"
            "n:1:2 [3] NCCL WARN NET/OFI Couldn't register memory region with regattr. RC: -14, ERROR: Bad address\n"
            ).findings[0]
    assert (f.facts["rc"], f.facts["error"]) == (-14, "Bad address")
    assert f.title.startswith("libfabric's verbs;ofi_rxm provider could not register")


def test_reset_without_error_code_in_log_names_none(run):
    f = run("  File \"/x/torch/distributed/distributed_c10d.py\", line 611, in init_process_group\n"
            "RuntimeError: Connection reset by peer\n").findings[0]
    assert "error_code" not in f.facts and "ncclRemoteError" not in f.title


SERIES = [
    # tokens per expert-parallel rank: every odd rank idle
    ("moe_imbalance", "tokens=16, EP16   before  [16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0]"),
    # the excerpt starts mid-epoch: its first line is a stall, not the warm-up
    ("slow_input", "\n".join(f"epoch: 1/100, iter: {it}/983, iter_time: {t}s, data_time: {d}s, total_loss: 5.6"
                             for it, t, d in [(240, 8.7, 8.4), (250, 1.9, 0.002), (260, 1.8, 0.001),
                                              (270, 4.5, 2.6)])),
    # NeMo's rank-prefixed reduced loss: the step, not the epoch, names where it jumped
    ("loss_spike", "\n".join(f"  0: Training epoch 0, iteration {i}/4679 | lr: 1e-06 | global_step: {i} | "
                             f"reduced_train_loss: {v}" for i, v in enumerate([0.50, 0.49, 0.48, 0.47, 0.49, 5.2]))),
]


def test_spike_is_placed_at_the_step_when_the_line_names_epoch_and_step(run):
    f = run("\n".join(f"  0: Training epoch 0, iteration {i}/4679 | global_step: {i} | reduced_train_loss: {v}"
                      for i, v in enumerate([0.50, 0.49, 0.48, 0.47, 0.49, 5.2])) + "\n").findings[0]
    assert f.facts["iteration"] == 5 and "epoch" not in f.facts


@pytest.mark.parametrize("symptom,text", SERIES, ids=[f"{s}-{i}" for i, (s, _) in enumerate(SERIES)])
def test_series_fires(run, symptom, text):
    d = run(text + "\n")
    assert [f.symptom for f in d.findings][:1] == [symptom]


QUIET = [
    # every GPU of the table is on the bus; several hosts' tables are not compared with one lspci count
    _SMI + "\n$ lspci | grep -i nvidia | grep -E 'VGA|3D' | wc -l\n2",
    _SMI + "\n" + _SMI + "\n$ lspci | grep -i nvidia | grep -E 'VGA|3D' | wc -l\n3",
    # lspci counting every NVIDIA function (audio, NVSwitch bridges) is not a GPU count
    _SMI + "\n$ lspci | grep -i nvidia | wc -l\n8",
    # EP ranks evenly loaded; a list whose length is not the EP size
    "tokens=16, EP4   after  [16, 16, 16, 16]",
    "EP8 layers: [3, 0, 7, 0]",
    # a reset connection with no torch.distributed frame above it
    '  File "/app/fetch.py", line 40, in get\n    r = session.get(url)\nConnectionResetError: Connection reset by peer',
    # the first logged step is the warm-up when the excerpt starts at the first interval
    "\n".join(f"epoch: 1/100, iter: {it}/983, iter_time: {t}s, data_time: {d}s, total_loss: 5.6"
              for it, t, d in [(10, 9.1, 8.9), (20, 1.9, 0.002), (30, 1.8, 0.001), (40, 1.7, 0.003)]),
    # Swin-style fp16 lines whose running grad_norm average reads inf after one skipped step: loss and scale behave
    "\n".join(f"INFO Train: [12/300][{i}00/1251]\tlr 0.000981\ttime 0.54 (0.55)\tloss {v} (3.70)\t"
              f"grad_norm 2.4 (inf)\tloss_scale 65536.0000 (62000.0)\tmem 9214MB" for i, v in
              enumerate([3.61, 3.77, 3.59, 3.67], 2)),
    # other losses than the training loss are not read as it
    "\n".join(f"global_step: {i} | val_loss: {v}" for i, v in enumerate([0.5, 0.49, 0.48, 0.47, 5.2])),
    # a store that answered: the words, not the error
    "INFO: TCPStore socket timeout set to 1800 s; rendezvous complete",
]


@pytest.mark.parametrize("text", QUIET, ids=[f"quiet-{i}" for i in range(len(QUIET))])
def test_near_miss_stays_quiet(run, text):
    d = run(text + "\n")
    assert not d.findings, [f.title for f in d.findings]
