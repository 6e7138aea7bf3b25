"""Fact keys that layers other than the parser that writes them read (store, report, CLI, engine).

A fact read across layers is named here once and imported by both sides; the registry (core.symptoms) says which
symptom carries which fact. Facts read only by playbooks are declared there by their plain names."""

HOSTS = "hosts"                        # hosts the failure was seen on
LAGGING_HOSTS = "lagging_hosts"        # nccl_timeout: hosts of the ranks that are behind
LOG_HOLDS_HOST = "log_holds_host"      # nccl_timeout: the log holds only this host's ranks (one node's share)
SOCKET_HOSTS = "socket_hosts"          # tcp_fallback: hosts whose data path was NET/Socket
OTHER_PROCESSES_GIB = "other_processes_gib"   # cuda_oom: memory other processes hold on the same GPU
MAX_DEVIATION = "max_deviation"        # moe_imbalance: worst expert load vs the mean
DROP_RATE = "drop_rate"                # moe_imbalance: worst token drop rate

# The role a host played in a finding (the store's `nodes` table, the report's drain candidates).
ROLE_INVOLVED = "involved"
ROLE_LAGGING = "lagging"
ROLE_TCP_FALLBACK = "tcp_fallback"
SUSPECT_ROLES = frozenset({ROLE_LAGGING, ROLE_TCP_FALLBACK})   # one incident is enough to check the host
