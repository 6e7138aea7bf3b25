"""The broad recall layer and the message generations added from the third wave of real logs: each rule fires on
the wording the programs print, and a near-miss beside it stays quiet."""
import pytest
from test_recall_wave4 import FIRES as WAVE4_FIRES
from test_recall_wave5 import FIRES as WAVE5_FIRES

FIRES = [
    # NCCL's own WARN lines that no precise rule knows yet, and topology/ring and shm-attach failures
    ("nccl_error", "nccl_error.topology",
     "host-3:3048:4991 [2] graph/rings.cc:38 NCCL WARN Error : ring 2 does not loop back to start (7 != 2)"),
    ("nccl_error", "nccl_error.topology",
     "[1,2]<stdout>:w-0:75:95 [2] graph/xml.h:101 NCCL WARN Attribute arch of node cpu not found"),
    ("nccl_error", "nccl_error.shm",
     "a-8:42:71 [0] misc/shmutils.cc:87 NCCL WARN Error while attaching to shared memory segment /dev/shm/nccl- "
     "(size 1928), error: No such file or directory (2)"),
    ("nccl_error", "nccl_error.ib_completion",
     "-worker-1:946:988 [0] transport/net_ib.cc:839 NCCL WARN NET/IB : Got completion with error 12, opcode 1, "
     "len 0, vendor err 129"),
    ("nccl_error", "nccl_error.warn",
     "n1:20:31 [0] proxy.cc:912 NCCL WARN [Proxy Service 3] Unable to post receive for channel 2"),
    ("nccl_error", "nccl_error.code",
     " .. w-0 pid 75: Test NCCL failure common.cu:961 'internal error - please report this issue to the NCCL "
     "developers / '"),
    # the OOM message's tail pasted without its head
    ("cuda_oom", None, "Tried to allocate 20.00 MiB (GPU 0; 1.96 GiB total capacity; 1.24 GiB already allocated; "
                       "2.88 MiB free; 1.25 GiB reserved in total by PyTorch)"),
    # a URL-encoded linker error
    ("version_mismatch", "version_mismatch.nccl_abi", "libtorch_cuda.so:%20undefined%20symbol:%20ncclCommRegister"),
    # the driver cannot bring a GPU up; the NVLink fabric is not up
    ("gpu_xid", "gpu_xid.init_failed", "[   21.09] NVRM: GPU 0000:41:00.0: RmInitAdapter failed! (0x22:0x56:894)"),
    ("nvlink_inactive", "nvlink_inactive.fabric",
     '"reason": "NVIDIA-H100-80GB-HBM3 checked fabric state; fabric manager found but not active",'),
    # EFA memory registration refused by the kernel driver
    ("efa_mr_registration", "efa_mr_registration.enomem",
     "[1038619.695161] infiniband efa_0: Failed to register mr [-12]"),
    # aws-ofi-nccl cannot start any protocol: no usable EFA provider
    ("efa_provider_missing", None, "h:1:2 [1] int nccl_net_ofi_create_plugin(nccl_net_ofi_plugin_t**):219 NCCL WARN "
                                   "NET/OFI Failed to initialize rdma protocol"),
    # any loss term read as NaN, whatever the format
    ("loss_nan", "loss_nan.loss_term", "{'train/backbone_loss': nan, 'train/decoder_loss': 5.81, 'epoch': 0.0}"),
    ("loss_nan", "loss_nan.loss_term", "Loss is nan, stopping training"),
] + WAVE4_FIRES + WAVE5_FIRES


@pytest.mark.parametrize("symptom,rule,text", FIRES, ids=[f"{s}-{i}" for i, (s, _, _) in enumerate(FIRES)])
def test_rule_fires(run, symptom, rule, text):
    d = run(text + "\n")
    assert d.findings, text
    assert d.findings[0].symptom == symptom
    if rule:
        assert d.findings[0].rule == rule


QUIET = [
    "h:1:2 [0] misc/ibvwrap.cc:105 NCCL WARN Failed to open libibverbs.so[.1]",       # no IB on this box: fine
    "h:1:2 [0] net_fastsocket.cc:674 NCCL WARN Maximum retry reached for connect 3.",
    "h:1:2 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.",
    "epoch 1 best_loss: inf  val_loss: 0.873",                                      # a bound, not a loss
    "Tried to allocate a new buffer for the cache",                                   # not the OOM tail
    "fabric manager started, all NVLinks up",
]


@pytest.mark.parametrize("text", QUIET)
def test_near_miss_stays_quiet(run, text):
    assert run(text + "\n").findings == []


def _mmdet(loss, gnorm, i):
    return (f"2024/05/10 15:4{i}:31 - mmengine - INFO - Epoch(train)  [2][{50 * i}/788]  lr: 2.0000e-03  "
            f"time: 0.8167  data_time: 0.0169  grad_norm: {gnorm}  loss: {loss}  loss_cls: 0.8781")


def test_a_blow_up_after_one_point_is_a_spike_but_a_small_rise_is_not(run):
    d = run("\n".join([_mmdet(1.5043, 3.45, 1), _mmdet(63.1261, 31101415.5, 2), _mmdet(4.88, 52.1, 3)]) + "\n")
    assert d.findings[0].symptom == "loss_spike"
    assert d.findings[0].facts["loss_at_spike"] == 63.1261
    assert run("\n".join([_mmdet(0.0001, 0.1, 1), _mmdet(0.002, 0.1, 2)]) + "\n").findings == []


def test_nan_grad_norms_beside_a_collapsing_loss_count_but_one_early_skip_does_not(run):
    nan_then_zero = [_mmdet(31.42, 3637.02, 1), _mmdet(32.01, "nan", 2), _mmdet(0.0, "nan", 3)]
    assert run("\n".join(nan_then_zero) + "\n").findings[0].rule == "loss_nan.grad_norm"
    early_skip = [_mmdet(1.90, "nan", 1), _mmdet(0.91, 3.97, 2), _mmdet(0.71, 2.88, 3)]
    assert run("\n".join(early_skip) + "\n").findings == []


def test_stalls_in_data_loading_every_few_steps_are_slow_input_but_a_fast_loader_is_not(run):
    stalls = ["load_data_time: 0.0001, train_step_time: 0.665"] * 3 + ["load_data_time: 19.6173, train_step_time: 0.686"]
    d = run("\n".join(stalls * 2) + "\n")
    assert d.findings[0].symptom == "slow_input" and d.findings[0].facts["input_share_pct"] > 25
    fast = [_mmdet(2.0 - i / 10, 1.0, i) for i in range(1, 6)]
    assert run("\n".join(fast) + "\n").findings == []


def test_the_ofi_tcp_provider_is_a_fallback_across_nodes_only(run):
    line = "{h}:48120:48302 [3] NCCL INFO NET/OFI Selected provider is tcp, fabric is 10.3.0.0/16 (found 1 nics)"
    two = "\n".join([line.format(h="p4d-a"), line.format(h="p4d-b"),
                     "p4d-a:48120:48302 [3] NCCL INFO Channel 01/0 : 11[3] -> 3[3] [receive] via NET/Libfabric/0"])
    assert run(two + "\n").findings[0].symptom == "tcp_fallback"
    one = "\n".join([line.format(h="g5-a"),
                     "g5-a:1:2 [0] NCCL INFO comm 0x55 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 1e0 - Init COMPLETE"])
    assert run(one + "\n").findings == []
