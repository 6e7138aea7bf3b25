"""What current releases print (captured on a GPU machine: torch 2.11, NCCL 2.28, transformers 5, Lightning 2.6),
with the near-misses on either side of each rule."""
from conftest import FIXTURES

SINGLE = (FIXTURES / "healthy" / "nccl228_one_node_two_ranks_no_ib.log").read_text()


def test_ib_probe_on_one_node_is_not_a_fallback_but_the_same_lines_across_two_nodes_are(run):
    assert run(SINGLE).findings == []
    lines = SINGLE.splitlines()
    other = [ln.replace("h200-dev:4410", "h200-dev2:5120").replace("rank 0 nranks 2", "rank 1 nranks 2")
             for ln in lines if "NCCL INFO" in ln]
    two_nodes = run("\n".join(lines + other) + "\n")
    assert [f.symptom for f in two_nodes.findings] == ["tcp_fallback"]
    assert "multi_node" in two_nodes.findings[0].facts["expected_because"]


def test_a_plugin_that_was_looked_for_still_makes_sockets_a_fallback_on_one_node(run):
    text = SINGLE.replace("NET/Plugin: Could not find: libnccl-net.so",
                          "NET/Plugin: Loaded net plugin NCCL RDMA Plugin (v8)")
    assert [f.symptom for f in run(text).findings] == ["tcp_fallback"]


def _hf(grad_norms):
    return "".join("{'loss': '2.31', 'grad_norm': '%s', 'learning_rate': '0.0001', 'epoch': '%.2f'}\n" % (g, i / 50)
                   for i, g in enumerate(grad_norms))


def test_transformers5_nan_grad_norms_count_only_as_a_run_up_to_the_end(run):
    finite = ["0.91", "0.88", "0.93", "0.87", "0.9"]
    assert run(_hf(finite + ["nan", "nan"])).findings == []                 # two in a row: could be fp16 skips
    f = run(_hf(finite + ["nan", "nan", "nan"])).findings
    assert [x.rule for x in f] == ["loss_nan.grad_norm"] and f[0].facts["grad_norm_nan_points"] == 3
    assert run(_hf(finite + ["nan", "nan", "nan", "0.9", "0.92"])).findings == []   # it recovered


def test_transformers5_quoted_loss_series_still_finds_a_spike(run):
    losses = [2.41, 2.39, 2.42, 2.38, 2.40, 2.37, 2.39, 6.95, 2.45, 2.40]
    text = "".join("{'loss': '%s', 'grad_norm': '0.9', 'learning_rate': '0.0001', 'epoch': '%.2f'}\n" % (v, i / 50)
                   for i, v in enumerate(losses))
    f = run(text).findings
    assert [x.symptom for x in f] == ["loss_spike"] and f[0].facts["loss_at_spike"] == 6.95
