"""Korean finding titles, built from the finding's facts (the parsers write English titles; a Korean reader gets the
same facts in Korean). A finding without a Korean form keeps its English title."""
from __future__ import annotations

import re
from typing import Any, Callable

from core import symptoms
from core.models import Finding

# The reasons the hang parser gives for a lagging rank, in Korean (matched on the English text).
_REASONS: tuple[tuple[re.Pattern, str], ...] = (
    (re.compile(r"stuck on an earlier collective \(SeqNum (\d+) vs (\d+)\)"), r"앞선 collective에 멈춰 있음 (SeqNum \1 vs \2)"),
    (re.compile(r"never enqueued SeqNum (\d+)"), r"SeqNum \1을 큐에 넣지 못함"),
    (re.compile(r"completed fewer collectives \(last completed (\d+) vs (\d+)\)"),
     r"완료한 collective가 더 적음 (마지막 완료 \1 vs \2)"),
    (re.compile(r"fewer collectives queued than its peers \((\d+) vs (\d+)\)"), r"다른 rank보다 큐에 쌓인 collective가 적음 (\1 vs \2)"),
    (re.compile(r"never reported a timeout.*"), "타임아웃을 보고하지 않음 (멈췄거나 죽은 rank일 가능성)"),
    (re.compile(r"missing from an otherwise unbroken run.*"), "연속된 rank 목록에서 빠짐 (멈췄거나 죽은 rank일 가능성)"),
    (re.compile(r"(\d+) of (\d+) ranks never joined the barrier"), r"\2개 rank 중 \1개가 barrier에 들어오지 않음"),
    (re.compile(r"could not reach the rendezvous store at (\S+) in (\S+) s.*"),
     r"\2초 동안 rendezvous store(\1)에 닿지 못함 (MASTER_ADDR나 포트 접근 불가, 또는 rank 0이 시작하지 않음)"),
    (re.compile(r".*which holds (\S+)'s ranks only.*"), r"이 로그에는 \1의 rank만 있어, 뒤처진 rank를 보려면 모든 노드의 로그가 필요함"),
)
_ACTIONS = {"drain": "노드를 빼세요(drain)", "reset": "GPU를 리셋하세요", "app": "애플리케이션 문제입니다"}
_NCCL_RULES = {
    "efa_completion": "EFA 전송 실패 (aws-ofi-nccl/libfabric completion 오류)", "efa_av": "EFA address vector에 피어를 추가하지 못함",
    "efa_endpoint": "aws-ofi-nccl이 EFA endpoint/domain을 만들지 못함", "ib_completion": "InfiniBand/RoCE 전송 완료 오류",
    "ib_setup": "InfiniBand/RoCE queue pair 설정 실패", "shm": "NCCL 공유 메모리(/dev/shm) 생성 실패",
    "duplicate_gpu": "두 rank가 같은 GPU에 배치됨", "collective_mismatch": "rank들이 collective를 서로 다르게 호출함",
    "remote": "피어 프로세스가 종료됐거나 네트워크 연결이 끊김", "cuda_failure": "NCCL 안의 CUDA 호출 실패",
    "code": "NCCL이 오류를 반환함", "topology": "rank들이 일관된 ring/토폴로지를 만들지 못함",
    "warn": "NCCL이 실패를 경고함",
}
_VERSION_RULES = {"driver_too_old": "NVIDIA 드라이버가 사용 중인 CUDA 런타임보다 오래됨",
                  "forward_compat": "지원되지 않는 환경에서 CUDA forward-compatibility 라이브러리가 로드됨",
                  "nccl_abi": "NCCL 라이브러리 ABI 불일치 (undefined symbol)",
                  "ofi_libfabric": "aws-ofi-nccl이 실행 시 로드된 것보다 새 Libfabric으로 빌드됨",
                  "ranks_disagree": "rank마다 버전이 다름"}


def reason(text: str) -> str:
    for pat, ko in _REASONS:
        if pat.search(text):
            return pat.sub(ko, text) if "\\" in ko else ko
    return text


def _ranks(v: Any) -> str:
    return ", ".join(map(str, v[:8])) + (f" 외 {len(v) - 8}개" if len(v) > 8 else "") if isinstance(v, list) else str(v)


def _oom(f: Finding, x: dict) -> str:
    where = f"GPU {x['device']}" if "device" in x else "GPU"
    if x.get("ranks"):
        where += f" (rank {_ranks(x['ranks'])})"
    t = f"{where} 메모리 부족"
    if "tried_gib" in x:
        t += f": {x['tried_gib']} GiB 할당 시도"
        if "free_gib" in x and "total_gib" in x:
            t += f", 전체 {x['total_gib']} GiB 중 여유 {x['free_gib']} GiB"
    if x.get("other_processes_gib"):
        t += f"; 다른 프로세스가 {x['other_processes_gib']} GiB 점유"
    if (x.get("reserved_unallocated_gib") or 0) >= 1:
        t += f"; 예약됐지만 쓰지 않는 {x['reserved_unallocated_gib']} GiB (단편화)"
    return t + (f" ({x['phase']} 중)" if x.get("phase") else "")


def _timeout(f: Finding, x: dict) -> str:
    op = x.get("op_type") or "collective"
    op = "/".join(op) if isinstance(op, list) else op
    t = f"{op}이(가) {x['timeout_ms'] // 1000}초 후 타임아웃" if x.get("timeout_ms") else f"{op} 타임아웃(행)"
    if x.get("reporting_ranks"):
        t += f" (보고한 rank {len(x['reporting_ranks'])}개)"
    if x.get("lagging_ranks"):
        t += f"; rank {_ranks(x['lagging_ranks'])}이(가) 뒤처짐"
        if x.get("lagging_hosts"):
            t += f" ({', '.join(x['lagging_hosts'][:4])})"
    if x.get("lagging_reason"):
        t += f": {reason(x['lagging_reason'])}"
    return t


def _tcp(f: Finding, x: dict) -> str:
    ifaces = f" ({', '.join(x['socket_interfaces'])})" if x.get("socket_interfaces") else ""
    why = set(x.get("expected_because", []))
    cause = ("InfiniBand가 꺼져 있음(NCCL_IB_DISABLE=1), IPoIB 소켓 사용" if "ib_disabled" in why
             else "aws-ofi-nccl 초기화 실패" if "ofi_init_failed" in why
             else "쓸 수 있는 InfiniBand 장치 없음" if why & {"ib_no_device", "ib_open_failed"}
             else "EFA provider 없음" if "efa_provider" in why else "RDMA 전송을 잡지 못함")
    expected = {"efa": "EFA", "infiniband": "InfiniBand"}.get(x.get("fabric", ""), "EFA/InfiniBand")
    return f"NCCL이 {expected} 대신 TCP 소켓{ifaces}으로 데이터를 보냄: {cause}"


def _loss_nan(f: Finding, x: dict) -> str:
    rule = f.rule.split(".")[-1]
    if rule == "scale_collapse":
        return f"fp16 loss scale이 {x.get('min_loss_scale', '최소값')}까지 떨어짐 (overflow {x.get('overflow_skips', 0)}회)"
    if rule == "grad_norm":
        return f"그래디언트 norm이 NaN/Inf (NaN 지점 {x.get('grad_norm_nan_points', 0)}개)"
    if rule == "loss_term":
        return f"loss 항목이 NaN/Inf가 됨 ({x.get('loss_term', 'loss')})"
    where = f" (iteration {x['first_nan_iteration']})" if "first_nan_iteration" in x else ""
    return f"학습 loss가 NaN/Inf가 됨{where}" + (" — 이후에도 계속 NaN" if x.get("persists") else "")


def _spike(f: Finding, x: dict) -> str:
    where = f" (iteration {x['iteration']})" if "iteration" in x else ""
    return (f"loss 스파이크{where}: {x.get('loss_before')} → {x.get('loss_at_spike')} "
            f"(최근 중앙값의 {x.get('ratio')}배)")


_CONDITIONS = {"init_failed": "드라이버가 GPU를 초기화하지 못함 (RmInitAdapter 실패)", "gpu_lost": "드라이버가 GPU를 잃음",
               "gpu_missing": "nvidia-smi가 PCI 버스의 GPU 일부를 보여 주지 않음",
               "ecc_uncorrectable": "GPU 메모리에 정정할 수 없는 ECC 오류", "gsp_timeout": "GPU의 GSP 펌웨어가 응답하지 않음",
               "row_remap_failure": "행 재매핑 실패", "row_remap_pending": "메모리 수리(행 재매핑)가 리셋을 기다림",
               "page_retirement_pending": "메모리 수리(페이지 폐기)가 리셋을 기다림",
               "amd_hw_exception": "ROCm 런타임이 GPU 하드웨어 예외를 보고함"}


def _xid(f: Finding, x: dict) -> str:
    ids = ", ".join(str(e.get("xid")) for e in x.get("xids", []) if isinstance(e, dict))
    where = x.get("hosts") or x.get("action_pci")
    hosts = f" ({', '.join(where[:3])})" if where else ""
    what = f"GPU Xid {ids}" if ids else next((_CONDITIONS[c] for c in x.get("conditions", []) if c in _CONDITIONS),
                                             "GPU 하드웨어 오류")
    return f"{what}{hosts}; {_ACTIONS.get(x.get('action'), '하드웨어 점검이 필요합니다')}"


_BUILDERS: dict[str, Callable[[Finding, dict], str]] = {
    "cuda_oom": _oom, "nccl_timeout": _timeout, "tcp_fallback": _tcp, "loss_nan": _loss_nan, "loss_spike": _spike,
    "gpu_xid": _xid,
    "nccl_error": lambda f, x: _NCCL_RULES.get(f.rule.split(".")[-1], "NCCL 오류")
    + (f" ({x.get('error_code') or x.get('efa_error') or x.get('cuda_error') or x.get('nccl_warning')})"
       if x.get("error_code") or x.get("efa_error") or x.get("cuda_error") or x.get("nccl_warning") else ""),
    "efa_mr_registration": lambda f, x: f"EFA가 {x.get('mem_type', '')} 메모리를 RDMA용으로 등록하지 못함"
    + (f" (장치 {x['device']}" if "device" in x else " (") + (f", RC {x['rc']}" if "rc" in x else "") + ")",
    "efa_provider_missing": lambda f, x: "libfabric에 쓸 수 있는 EFA provider가 없어 aws-ofi-nccl이 EFA를 쓰지 못함",
    "fork_enomem": lambda f, x: ("libfabric EFA provider가 fork() 때문에 작업을 중단함 (데이터 로더 워커)"
                                 if f.rule.endswith("efa_fork_abort") else "fork()가 메모리를 할당하지 못함 (DataLoader 워커 시작 실패)"),
    "nvlink_inactive": lambda f, x: f"NVLink 링크 {x.get('down_count', '')}개가 비활성" if x.get("down_count")
    else "NVLink 진단(dcgmi diag) 실패" if x.get("dcgm_diag_failed") else "NVLink 패브릭이 올라오지 않음 (fabric manager / NVLS)",
    "version_mismatch": lambda f, x: _VERSION_RULES.get(f.rule.split(".")[-1], "버전 불일치"),
    "slow_comm": lambda f, x: (f"집합 통신이 스텝 시간의 {x['comm_share_pct']}%를 차지" if "comm_share_pct" in x
                               else f"{x['instance']}에서 NCCL의 EFA 채널이 GPUDirect RDMA 없이 동작: 모든 전송이 호스트 메모리를 거침"
                               if "net_channel_lines" in x else "집합 통신이 패브릭이 낼 수 있는 속도에 한참 못 미침"),
    "straggler": lambda f, x: "느린 rank가 작업 전체를 늦춤: "
    + ("rank " + ", ".join(map(str, x["slow_ranks"][:8])) if x["slow_ranks"] else "어느 rank인지는 미확인")
    + (f" (가장 빠른 rank보다 {x['slowdown_pct']}% 느림)" if "slowdown_pct" in x else "")
    + (f" (GPU sniff test에서 중앙값보다 {x['below_median_pct']}% 낮음)" if "below_median_pct" in x else ""),
    "moe_imbalance": lambda f, x: "MoE expert 라우팅 불균형" + (f": 최대 편차 {x['max_deviation']}" if "max_deviation" in x else "")
    + (f", token drop rate {x['drop_rate']}" if "drop_rate" in x else ""),
}


def title(f: Finding) -> str:
    """The finding's title in Korean, from its facts; the English title when a fact it needs is missing."""
    build = _BUILDERS.get(f.symptom)
    declared = symptoms.get(f.symptom)
    try:
        if build:
            return build(f, f.facts)
        return declared.title_ko_format.format(**f.facts) if declared and declared.title_ko_format else f.title
    except (KeyError, TypeError, ValueError):
        return f.title
