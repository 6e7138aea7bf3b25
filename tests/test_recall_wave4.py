"""Message generations and metric formats added from the fourth wave of real logs (tests/corpus/wave4.jsonl): each
one fires on the programs' own wording, and the near-miss beside it stays quiet. The single-message cases (FIRES)
run in test_recall_layer.py beside the third wave's."""
import pytest

FIRES = [
    # nvidia-smi / the k8s device plugin when a GPU is gone
    ("gpu_xid", "gpu_xid.gpu_lost", "Unable to determine the device handle for GPU 0000:BA:00.0: Unknown Error"),
    ("gpu_xid", "gpu_xid.gpu_lost", "I0723 nvidia.go:186] XidCriticalError: Xid=999 on Device=GPU-3f1a, "
                                    "the device will go unhealthy."),
    # NVLink: a CUDA uncorrectable link error, NCCL refusing P2P over NVLink, the fabric not ready (error 802)
    ("nvlink_inactive", "nvlink_inactive.link_error",
     "RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution"),
    ("nvlink_inactive", "nvlink_inactive.link_error",
     "n:1:2 [1] graph/paths.cc:712 NCCL WARN P2P is disabled between NVLINK connected GPUs 1 and 0."),
    ("nvlink_inactive", "nvlink_inactive.fabric",
     "UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). Error 802: system not yet "
     "initialized"),
    # the CUDA build check wrapped after "compile", indented under pip's subprocess output
    ("version_mismatch", "version_mismatch.cuda_build",
     "      The detected CUDA version (11.8) mismatches the version that was used to compile\n"
     "      PyTorch (12.4). Please make sure to use the same CUDA versions."),
    # an inference server's NCCL wrapper
    ("nccl_error", "nccl_error.code", "RuntimeError: NCCL error: unhandled system error (run with NCCL_DEBUG=INFO)"),
    # aws-ofi-nccl: no provider; EFA provider aborting on its receive buffers
    ("efa_provider_missing", None,
     "h:1:2 [0] nccl_net_ofi_rdma_init:7978 NCCL WARN NET/OFI OFI fi_getinfo() call failed: No data available"),
    ("efa_mr_registration", "efa_mr_registration.enomem",
     "Libfabric error: (-12) Cannot allocate memory\nEFA internal error: (4112) Failure to post internal receive "
     "buffers"),
    # two ranks whose ring runs over NET/Socket: the peers are on different nodes even without host names
    ("tcp_fallback", None, "a:1:2 [0] misc/ibvwrap.cu:63 NCCL WARN Failed to open libibverbs.so[.1]\n"
                           "a:1:2 [0] NCCL INFO comm 0x7f rank 0 nranks 2 cudaDev 0\n"
                           "a:1:9 [0] NCCL INFO Ring 00 : 1 -> 0 [receive] via NET/Socket/0\n"
                           "a:1:9 [0] NCCL INFO Ring 00 : 0 -> 1 [send] via NET/Socket/0"),
]

_MEGATRON = (" iteration {it}/ 40000 | consumed samples: 100 | elapsed time per iteration (ms): 700.0 | "
             "lm loss: {loss}E+00 | load_balancing_loss: {lbl}E+00 | loss scale: 1.0 | grad norm: 0.4 |")


def _megatron(rows):
    return "\n".join(_MEGATRON.format(it=i * 20, loss=loss, lbl=lbl) for i, (loss, lbl) in enumerate(rows, 1))


def _composer(losses):
    return "\n".join(f"[batch={i}/4800]:\n\t Train time/batch: {i}\n\t Train loss/train/total: {v}"
                     for i, v in enumerate(losses, 1))


SERIES = [
    # MoE balance metrics some trainers print instead of raw counts
    ("moe_imbalance", _megatron([(4.41, 1.09), (4.43, 3.87), (4.47, 6.20), (4.50, 6.89)])),
    ("moe_imbalance", "[step=10]\n    train/block 0 load imbalance=5.81\n    train/block 1 load imbalance=6.43"),
    ("moe_imbalance", "step 4200 | loss 3.41 | router/max_frac_max 0.934 | router/active_min 1"),
    ("moe_imbalance", "step=900 loss=2.87 moe/entropy_normalized=0.21 moe/kl_to_uniform=2.19"),
    ("moe_imbalance", "\t Train mb_moe/all_layers_max_tpe: 0.9861\n\t Train mb_moe/all_layers_median_tpe: 0.0918"),
    # spikes: Composer's metric block, tacotron2's "Train loss <iter> <value>", a smooth LLM curve jumping 45%,
    # a Dice+CE loss that lives below zero jumping above it
    ("loss_spike", _composer([3.4127, 3.3982, 3.4511, 7.8240])),
    ("loss_spike", "Train loss 9210 0.412213 Grad Norm 0.58 1.62s/it\nTrain loss 9211 0.409871 Grad Norm 0.60 1.61s/it\n"
                   "Train loss 9212 0.415630 Grad Norm 0.57 1.62s/it\nTrain loss 9213 1.931447 Grad Norm 38.2 1.62s/it"),
    ("loss_spike", _megatron([(4.812771, 1.0), (4.771305, 1.0), (4.742058, 1.0), (6.920514, 1.0)])),
    ("loss_spike", "2025: Epoch 29\n2025: train_loss -0.6812\n2025: Epoch 30\n2025: train_loss 0.3127"),
    # input-bound steps: lerobot's update/data seconds, Megatron's timer block
    ("slow_input", "\n".join(f"step:{i} loss:0.41 updt_s:0.30 data_s:{d}" for i, d in
                             enumerate([4.8, 5.1, 4.9, 4.7], 20))),
    ("slow_input", "(min, max) time across ranks (ms):\n    forward-backward ...: (3902.11, 3910.47)\n"
                   "    forward-compute ...: (3310.52, 3336.90)\n    batch-generator ...: (2871.44, 2903.66)"),
]


@pytest.mark.parametrize("symptom,text", SERIES, ids=[f"{s}-{i}" for i, (s, _) in enumerate(SERIES)])
def test_series_fires(run, symptom, text):
    d = run(text + "\n")
    assert [f.symptom for f in d.findings][:1] == [symptom]


QUIET = [
    # a healthy MoE run: Megatron's balancing loss settling from 1.44 to ~1.0; OLMo-core blocks near 1.3; routing
    # entropy in its healthy band; a one-off high reading
    _megatron([(11.56, 1.436), (10.93, 1.316), (10.52, 1.099), (9.87, 1.038)]),
    "[step=10]\n    train/block 0 load imbalance=1.31\n    train/block 1 load imbalance=1.25",
    "step=900 loss=2.70 moe/entropy_normalized=0.81 moe/kl_to_uniform=0.43",
    "\t Train mb_moe/all_layers_max_tpe: 0.2742\n\t Train mb_moe/all_layers_median_tpe: 0.2496",
    _megatron([(4.41, 2.6), (4.43, 1.1), (4.47, 1.05), (4.50, 1.02)]),
    # a diffusion loss: each step samples its own noise level, so 2x swings are normal
    "steps: 1 loss: 0.0614\nsteps: 2 loss: 0.0571\nsteps: 3 loss: 0.0359\nsteps: 4 loss: 0.1193\nsteps: 5 loss: 0.0702",
    # a smooth curve creeping up by 10%
    _megatron([(4.80, 1.0), (4.79, 1.0), (4.81, 1.0), (5.28, 1.0)]),
    # the first logged step waits for the workers to start; later ones do not
    "\n".join(f"Epoch [1][{i}00/5005] time: {t}, data_time: {d}, loss: 6.5" for i, (t, d) in
              enumerate([(6.43, 5.76), (0.196, 0.008), (0.158, 0.023), (0.165, 0.005)], 1)),
    # Megatron timers where the batch generator is a small part of the step
    "(min, max) time across ranks (ms):\n    forward-backward ...: (5164.84, 5177.15)\n"
    "    batch-generator ...: (408.98, 817.78)",
    # IB switched off on purpose, sockets on Ethernet, four ranks in one container that ships an IB plugin
    "c:3:4 [0] NCCL INFO Plugin Path : /opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so\n"
    "c:3:4 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n"
    "c:3:4 [0] NCCL INFO NET/IB : No device found.\n"
    "c:3:4 [0] NCCL INFO NET/Socket : Using [0]eth0:172.17.0.2<0>\n"
    "c:3:4 [0] NCCL INFO Using network Socket\n"
    "c:1:2 [0] NCCL INFO comm 0x55 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 18000 - Init START",
    # NCCL says every rank is on one node
    "h:3:4 [0] NCCL INFO NET/IB : No device found.\nh:3:4 [0] NCCL INFO P2P plugin IBext\n"
    "h:3:4 [0] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.2<0>\nh:3:4 [0] NCCL INFO Using network Socket\n"
    "h:3:4 [0] NCCL INFO comm 0x55 rank 0 nRanks 8 nNodes 1 localRanks 8 localRank 0 MNNVL 0",
    # CPU memory corrected errors are not a GPU fault; a one-line CUDA mismatch of a different kind of message
    "kernel: EDAC MC0: 4 CE error on CPU#0Channel#2_DIMM#0 (channel:2 slot:0 page:0x0 offset:0x0 grain:8)",
    "nvidia-smi: NVLink is up on all 18 links; P2P is enabled between NVLINK connected GPUs",
]


@pytest.mark.parametrize("text", QUIET, ids=[f"quiet-{i}" for i in range(len(QUIET))])
def test_near_miss_stays_quiet(run, text):
    d = run(text + "\n")
    assert not d.findings, [f.title for f in d.findings]
