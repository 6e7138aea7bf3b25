"""Quiet on the harmless: NCCL's informational WARNs, sockets on a single host even when the network plugin fails to
load, and the socket transport's start-up line beside an RDMA transport. Each with the near-miss that must still
fire."""


def _symptoms(d):
    return [f.symptom for f in d.findings]


def test_the_graph_search_falling_back_to_simple_order_is_not_an_error(run):
    text = ("gpu-a:801:801 [2] NCCL INFO NET/OFI Selected Provider is efa\n"
            "gpu-a:801:801 [2] NCCL INFO Using network AWS Libfabric\n"
            "gpu-a:801:870 [2] graph/search.cc:765 NCCL WARN Could not find a path for pattern 4, falling back to "
            "simple order\n")
    assert run(text).findings == []


def test_a_real_topology_error_still_is_one(run):
    text = "gpu-a:801:870 [2] NCCL WARN Attribute busid of node nic not found\n"
    assert _symptoms(run(text))[:1] == ["nccl_error"]


SINGLE_HOST = """c0ffee12ab34:51:902 [0] ofi_init:1355 NCCL WARN NET/OFI aws-ofi-nccl initialization failed
c0ffee12ab34:51:902 [0] NCCL INFO NET/IB : No device found.
c0ffee12ab34:51:902 [0] NCCL INFO NET/Socket : Using [0]{iface}:{addr}<0>
c0ffee12ab34:51:902 [0] NCCL INFO Using network Socket
c0ffee12ab34:53:53 [2] NCCL INFO Bootstrap : Using {iface}:{addr}<0>
"""


def test_sockets_on_one_host_over_the_loopback_are_not_a_fallback(run):
    assert run(SINGLE_HOST.format(iface="lo", addr="127.0.0.1")).findings == []


def test_the_same_plugin_failure_on_a_routable_interface_is_still_a_fallback(run):
    # eth0 could reach another node: with the plugin failing, sockets may well carry the data between nodes
    assert _symptoms(run(SINGLE_HOST.format(iface="eth0", addr="10.4.0.12")))[:1] == ["tcp_fallback"]


OLD_NCCL = """head-0:20:289 [0] NCCL INFO NET/Socket : Using [0]ib0:10.9.1.1<0>
head-0:20:289 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 0.
head-0:20:289 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.9.1.1<0>
NCCL version 2.4.8+cuda10.1
worker-1:41:312 [0] NCCL INFO NET/Socket : Using [0]ib0:10.9.1.2<0>
worker-1:42:310 [1] NCCL INFO NET/Socket : Using [0]ib0:10.9.1.2<0>
"""


def test_the_socket_start_up_line_beside_net_ib_is_not_a_fallback(run):
    assert run(OLD_NCCL).findings == []


def test_a_host_that_says_it_uses_the_socket_network_is_still_a_fallback(run):
    text = OLD_NCCL + "worker-1:41:312 [0] NCCL INFO Using network Socket\n"
    assert _symptoms(run(text))[:1] == ["tcp_fallback"]


PDSH = ("{label}gpu-node7:148969:148969 [3] NCCL INFO NET/Socket : Using [0]enp161s0f0:10.8.3.17<0> "
        "[1]br-a29d90e213e7:192.168.203.1<0>\n{label}gpu-node7:148969:148969 [3] NCCL INFO Using network Socket\n")


def test_a_node_address_label_from_a_multi_node_launcher_makes_sockets_a_fallback(run):
    # DeepSpeed's pdsh runner labels every line with its node; it only runs that way on several nodes
    assert _symptoms(run(PDSH.format(label="10.8.3.17: ")))[:1] == ["tcp_fallback"]


def test_the_same_lines_without_the_label_on_one_node_stay_quiet(run):
    assert run(PDSH.format(label="")).findings == []
