"""The symptom registry: the one place a symptom is declared.

A symptom's id is the name it has everywhere: in findings, playbooks, the corpus and the store. Its family is the
stem of the three files that handle it: `parsers/<family>.py` (or the package `parsers/<family>/` once the family has
grown several modules), `playbooks/<family>.yaml`, `knowledge/<family>.md`.
Everything else that used to be spelled out per symptom in other layers derives from here: the list of valid ids,
the root-cause ordering (`rank`, `causes`), display names, which facts name hosts (and the role a host played),
how the weekly report groups a symptom, and which fact keys a playbook may test.

Adding a symptom: one entry below, its parser, its playbook, its runbook section and its fixtures."""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from core import facts as F

# Report groups: how the weekly report treats a symptom beyond counting it.
HARDWARE = "hardware"   # a host named in it is a drain candidate after one incident
TRAINING = "training"   # counted per job in the loss section
ROUTING = "routing"     # plotted over time in the MoE section
THROUGHPUT = "throughput"   # listed per job over time, with its key number, in the throughput section
CONFIGURATION = "configuration"   # a setting or an install to fix: the hosts it names are never drain candidates


@dataclass(frozen=True, slots=True)
class Symptom:
    id: str
    family: str
    severity: str                     # the usual severity; a parser may say otherwise for one rule
    rank: int                         # causal rank: lower = more likely to be what started a failure
    title: str                        # English display name
    title_ko: str                     # Korean display name
    facts: tuple[str, ...]            # fact keys its findings may carry (what `facts.*` in a playbook may test)
    causes: tuple[str, ...] = ()      # symptoms that can cause this one, most fundamental first
    host_facts: Mapping[str, str] = field(default_factory=dict)   # fact holding host names -> the host's role
    report: str = ""                  # HARDWARE, TRAINING, ROUTING or nothing special
    title_ko_format: str = ""         # a Korean finding title from its facts ("{fact}"), when no builder has one


_REGISTRY: tuple[Symptom, ...] = (
    Symptom("cuda_oom", "oom", "critical", 3, "CUDA out of memory", "GPU 메모리 부족(CUDA OOM)",
            ("allocated_gib", "count", "device", "free_gib", "other_pids", F.OTHER_PROCESSES_GIB, "phase",
             "needed_gib", "private_pools_gib", "process_in_use_gib", "ranks", "reserved_gib", "reserved_unallocated_gib",
             "total_gib", "tried_gib")),
    Symptom("nccl_timeout", "hangs", "critical", 9, "NCCL collective timeout (hang)", "NCCL collective 타임아웃(행)",
            ("aborted_ranks", "barrier", "elapsed_ms", "exit_code", "first_failure_rank", F.HOSTS, F.LAGGING_HOSTS,
             "lagging_ranks", "lagging_reason", F.LOG_HOLDS_HOST, "master_addr", "master_port", "missing_reported_by", "op_type",
             "reporting_ranks", "seq_by_rank", "seq_num", "store_root_rank", "timeout_ms", "waited_s", "world_size"),
            causes=("gpu_xid", "nvlink_inactive", "version_mismatch", "cuda_oom", "efa_provider_missing",
                    "efa_mr_registration", "fork_enomem", "nccl_error"),
            host_facts={F.LAGGING_HOSTS: F.ROLE_LAGGING, F.HOSTS: F.ROLE_INVOLVED}),
    Symptom("nccl_error", "nccl_errors", "critical", 7, "NCCL error", "NCCL 오류",
            ("cuda_error", "efa_error", "error_code", "hosts", "ib_status", "ib_status_meaning", "ibv_call",
             "ibv_error", "nccl_version", "nccl_warning", "peer", "ranks", "rc", "vendor_err", "message_bytes",
             "posted_bytes"),
            causes=("gpu_xid", "nvlink_inactive", "version_mismatch", "cuda_oom", "efa_mr_registration",
                    "efa_provider_missing"),
            host_facts={F.HOSTS: F.ROLE_INVOLVED}),
    Symptom("efa_mr_registration", "efa", "critical", 5, "EFA memory registration failed", "EFA 메모리 등록 실패",
            ("bytes", "cause", "count", "device", "dmabuf", "error", "function", "hosts", "mem_type", "rc", "ruled_out"),
            host_facts={F.HOSTS: F.ROLE_INVOLVED}),
    Symptom("tcp_fallback", "efa", "error", 8, "TCP sockets instead of EFA/IB", "EFA/IB 대신 TCP 소켓으로 통신",
            ("expected_because", "fabric", "bootstrap_off_en", "net_plugin_missing", F.SOCKET_HOSTS, "socket_interfaces", "rdma_hosts"),
            causes=("efa_provider_missing", "version_mismatch"),
            host_facts={F.SOCKET_HOSTS: F.ROLE_TCP_FALLBACK}, report=CONFIGURATION),
    Symptom("efa_provider_missing", "efa", "critical", 4, "No EFA provider in libfabric",
            "libfabric에 EFA provider 없음", ("count",), report=CONFIGURATION),
    Symptom("fork_enomem", "efa", "critical", 6, "fork() could not allocate memory", "fork() 메모리 할당 실패",
            ("count", "fork_seen"), report=CONFIGURATION),
    Symptom("loss_spike", "convergence", "warning", 11, "Loss spike", "loss 스파이크",
            ("epoch", "grad_norm_at_spike", "grad_norm_before", "iteration", "line", "loss_at_spike", "loss_before",
             "peak_epoch", "peak_iteration", "peak_loss", "ratio", "recovered", "spikes"), report=TRAINING),
    Symptom("loss_nan", "convergence", "error", 10, "Loss or gradient NaN", "loss/그래디언트 NaN",
            ("first_nan_epoch", "first_nan_iteration", "first_nan_line", "grad_norm_nan_points", "last_finite_loss",
             "loss_term", "min_loss_scale", "nan_iterations", "nan_points", "overflow_skips", "persists"), report=TRAINING),
    Symptom("gpu_xid", "gpu", "critical", 0, "GPU hardware or driver error (Xid)", "GPU 하드웨어/드라이버 오류(Xid)",
            ("action", "action_pci", "conditions", "gpus_listed", "gpus_on_pci", "hosts", "pci", "vendor", "xids"),
            host_facts={F.HOSTS: F.ROLE_INVOLVED}, report=HARDWARE),
    Symptom("nvlink_inactive", "gpu", "critical", 1, "NVLink links down", "NVLink 링크 다운",
            ("down_count", "links_down", "dcgm_diag_failed", "fabric_down", "link_error", "gpu_model",
             "expected_links"), report=HARDWARE),
    Symptom("version_mismatch", "versions", "critical", 2, "Version mismatch", "버전 불일치",
            ("differing", "driver_supports_cuda", "missing", "cuda_detected", "cuda_torch_built", "driver",
             "driver_cuda", "cuda", "nccl", "torch", "libfabric", "aws_ofi_nccl", "option", "library"),
            report=CONFIGURATION),
    Symptom("moe_imbalance", "moe", "warning", 12, "MoE expert load imbalance", "MoE expert 부하 불균형",
            ("cold_experts", F.DROP_RATE, "expert_counts", "hot_experts", "imbalanced_observations",
             F.MAX_DEVIATION, "max_min_ratio", "observations", "routing_metric", "routing_value"), report=ROUTING),
    Symptom("slow_input", "slow", "warning", 13, "Training waits on input data", "입력 데이터를 기다리느라 느린 학습",
            ("input_share_pct", "input_row", "profile_total_ms", "steps_read", "worst_step_input_pct"),
            report=THROUGHPUT, title_ko_format="학습이 입력 데이터를 기다림: 데이터 로딩이 시간의 {input_share_pct}%를 차지"),
    Symptom("low_gpu_util", "slow", "warning", 14, "GPUs are underused", "GPU 활용률 저조",
            ("gpu_model", "gpus", "mfu_pct", "optimizer_share_pct", "peak_tflops", "readings", "samples",
             "tflops_per_gpu", "util_pct"),
            report=THROUGHPUT, title_ko_format="GPU가 제 성능을 내지 못함: MFU나 활용률이 목표보다 낮음"),
    Symptom("slow_comm", "slow", "warning", 12, "Communication is slow", "통신이 느림",
            ("busbw_gbps", "comm_share_pct", "expected_because", "expected_gbps", "fabric", "gpu", "instance",
             "message_bytes", "net_channel_lines", "nodes",
             "op", "ratio_pct", "reports", "timers", "top_kernel"),
            causes=("tcp_fallback", "efa_provider_missing", "nvlink_inactive", "version_mismatch"),
            report=THROUGHPUT),   # its Korean title depends on the rule: bot.answer.titles_ko builds it
    Symptom("straggler", "slow", "warning", 12, "A slow rank or node holds the job back", "느린 rank/노드(straggler)",
            ("clock_mhz", "fleet_clock_mhz", F.LAGGING_HOSTS, "reports", "score", "slow_nodes", "slow_ranks", "slowdown_pct",
             "slow_reports", "threshold", "detector", "below_median_pct", "metric"),
            host_facts={F.LAGGING_HOSTS: F.ROLE_LAGGING}, report=THROUGHPUT),
    Symptom("pipeline_bubble", "slow", "warning", 15, "Pipeline bubble", "파이프라인 버블",
            ("bubble_pct", "bubble_pct_after", "full_pipeline_batch", "global_batch_size", "layers_per_virtual_stage",
             "micro_batches", "pipeline_stages", "rampup", "source", "target_rampup", "target_global_batch_size", "target_gradient_accumulation_steps",
             "target_micro_batch_size",
             "target_micro_batches", "target_virtual_stages", "virtual_stages"),
            report=THROUGHPUT,
            title_ko_format="스테이지 {pipeline_stages}개에 스텝당 마이크로배치 {micro_batches}개, "
                            "GPU가 스텝의 약 {bubble_pct}% 동안 쉼"),
)

_ALL: dict[str, Symptom] = {s.id: s for s in _REGISTRY}
SYMPTOMS: Mapping[str, Symptom] = MappingProxyType(_ALL)   # built-in, then any a team declared (register)
IDS: tuple[str, ...] = tuple(SYMPTOMS)                      # the built-in ids
TEAM = "team"   # the family of symptoms a team declares in its playbook directory (no parser module of its own)
FAMILIES: tuple[str, ...] = tuple(dict.fromkeys(s.family for s in _REGISTRY))
UNKNOWN_RANK = 99


def register(s: Symptom) -> None:
    """Add a symptom a team declared next to its detection rules (TRIAGE_PLAYBOOKS). The same declaration twice is
    fine (the playbooks are loaded again); a built-in id, or another declaration of the same id, is an error."""
    known = _ALL.get(s.id)
    if known is not None and known != s:
        raise ValueError(f"symptom '{s.id}' is already declared" + (" (built in)" if s.id in IDS else ""))
    _ALL[s.id] = s


def ids() -> tuple[str, ...]:
    """Every symptom id now known: the built-in ones, then the teams'."""
    return tuple(_ALL)


def get(symptom: str) -> Symptom | None:
    return SYMPTOMS.get(symptom)


def rank(symptom: str) -> int:
    s = SYMPTOMS.get(symptom)
    return s.rank if s else UNKNOWN_RANK


def causes(symptom: str) -> tuple[str, ...]:
    s = SYMPTOMS.get(symptom)
    return s.causes if s else ()


def in_group(group: str) -> frozenset[str]:
    return frozenset(s.id for s in _REGISTRY if s.report == group)


def name(symptom: str, lang: str) -> str:
    """The Korean display name in Korean; the id itself in English (answers name the id people search for)."""
    s = SYMPTOMS.get(symptom)
    return s.title_ko if s and lang == "ko" else symptom


def _check() -> None:
    for s in _REGISTRY:
        unknown = [c for c in s.causes if c not in SYMPTOMS]
        if unknown or not set(s.host_facts) <= set(s.facts):
            raise AssertionError(f"symptom registry: {s.id} names unknown causes or host facts")


_check()
