"""The weekly report from a store seeded with several weeks of diagnoses made by the real engine."""
import json
import os
import struct
import subprocess
import sys
from datetime import datetime, timedelta, timezone

import pytest

from bot import report
from bot.proactive.schedule import Cron, Scheduler
from bot.store.store import Store
from conftest import FIXTURES, ROOT

NOW = datetime(2026, 11, 30, 0, 0, tzinfo=timezone.utc)
F = FIXTURES


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


@pytest.fixture
def seeded(tmp_path, run):
    store = Store(tmp_path / "r.db")

    def add(path, days_ago, job="", text=None):
        data = text.encode() if text is not None else (F / path).read_bytes()
        d = run(data, path.split("/")[-1])
        at = (NOW - timedelta(days=days_ago)).isoformat(timespec="seconds")
        return store.record(d, data, source="cli", job_key=job, at=at)

    ids = {}
    # this week
    for i in range(3):
        ids.setdefault("oom", []).append(add("cuda_oom/new_format_fragmented.log", 1 + i, "job-a"))
    for i in range(2):
        ids.setdefault("hang", []).append(add("nccl_timeout/lagging_rank.log", 2 + i, "job-h"))
    for i in range(2):
        add("gpu_xid/xid79.log", 3 + i, f"job-x{i}")
    add("tcp_fallback/env_dump.log", 2, "job-t")
    add("efa_mr_registration/rail_rc22.log", 4, "job-e")
    add("report/all_reduce_p5_socket.log", 5, "bench-1")
    add("report/all_reduce_p5_healthy.log", 5, "bench-2")
    add("loss_spike/megatron_spike.log", 2, "job-b")
    add("loss_nan/megatron_nan.log", 1, "job-b")
    add("moe_imbalance/expert_counts.log", 3, "job-m")
    add("version_mismatch/ranks_disagree.log", 6, "job-v")
    unknown = "RuntimeError: Checkpoint shard 17 failed to load from /fsx/ckpt/step_1200/shard_17.pt\n"
    add("misc/ckpt1.log", 2, "job-k", unknown)
    add("misc/ckpt2.log", 1, "job-k", unknown.replace("17", "23"))
    fork = (F / "fork_enomem/dataloader.log").read_text()
    ids["fork"] = add("fork_enomem/dataloader.log", 4, "job-c")
    add("job-c-rerun.log", 3, "job-c", "+ export FI_EFA_USE_HUGE_PAGE=0\n" + fork)
    add("healthy/socket_bootstrap_efa.log", 2, "job-ok")
    # the weeks before
    add("cuda_oom/megatron_args_oom.log", 9, "job-old")
    add("nccl_error/ib_retry_exceeded.log", 10, "job-old")
    add("nccl_error/shm_full.log", 12, "job-old")
    add("gpu_xid/xid13_app.log", 20, "job-older")
    store.vote(ids["oom"][0], "U1", "up")
    store.vote(ids["hang"][0], "U2", "up")
    store.vote(ids["fork"], "U3", "down", "nccl_error")
    return store, ids


def test_report_numbers_sections_and_charts(seeded, tmp_path):
    store, ids = seeded
    rep = report.make(store, NOW - timedelta(days=7), NOW, tmp_path / "out")
    r = rep.data
    assert r.total == 20 and r.previous_total == 3
    assert r.by_symptom["cuda_oom"] == 3 and r.by_symptom["nccl_timeout"] == 2 and r.by_symptom["gpu_xid"] == 2
    assert r.previous_by_symptom["nccl_error"] == 2
    top = r.root_causes[0]
    assert (top["rule"], top["count"], top["score"]) == ("cuda_oom.allocator", 3, 9)
    nodes = {n["host"]: n for n in r.nodes}
    assert nodes["p5-st-2"]["incidents"] == 2 and "lagging" in nodes["p5-st-2"]["roles"]
    assert nodes["ip-10-4-12-88"]["symptoms"]["gpu_xid"] == 2
    assert len(r.versions["nccl"]) >= 3
    assert any("efa-installer 1.28.0" in w["text"] for w in r.version_warnings)
    huge = next(c for c in r.changes if c["name"] == "FI_EFA_USE_HUGE_PAGE")
    assert (huge["count"], huge["jobs_recommended"], huge["jobs_applied"]) == (2, 1, 1)
    mbs = next(c for c in r.changes if c["name"] == "--micro-batch-size")
    assert mbs["count"] == 3 and mbs["jobs_applied"] == 0
    bench = {b["max_size_busbw"]: b for b in r.benchmarks}
    assert bench[31.2]["ratio"] < 0.7 and bench[362.5]["ratio"] > 0.7 and bench[31.2]["expected_busbw"] == 400.0
    ck = next(u for u in r.unclaimed if "Checkpoint shard" in u["template"])
    assert ck["diagnoses"] == 2 and ck["lines"] == 2
    assert r.votes == {"up": 2, "down": 1} and r.wrong == [{"id": ids["fork"], "said": "fork_enomem", "right": "nccl_error"}]
    assert r.precision["cuda_oom"] == [1, 1] and r.precision["fork_enomem"] == [0, 1]
    assert sum(n for _, n in r.precision.values()) == 3
    assert {j["job"]: (j["loss_spike"], j["loss_nan"]) for j in r.loss}["job-b"] == (1, 1)
    assert r.moe and r.moe[0]["drop_rate"] == 0.184
    slow = [t for t in r.throughput if t["symptom"] == "slow_comm"]
    assert [(t["job"], t["measure"], t["value"]) for t in slow] == [("bench-1", "busbw % of expected", 7.8)]
    texts = " | ".join(t["text"] for t in r.tune_next)
    assert "Drain and health-check p5-st-2" in texts and "Pin nccl" in texts and "reaches 31 GB/s" in texts
    assert "Apply PYTORCH_CUDA_ALLOC_CONF = expandable_segments:True: the first fix for 3 root cause(s), applied in 0 " \
           "of 1 job(s)" in texts
    assert "zero_optimization.stage = 3" not in texts  # a last-resort rung is not a tuning recommendation
    assert r.tune_next[0]["text"].startswith("Drain and health-check")
    assert "unrecognised error" in texts
    md = rep.markdown_path.read_text()
    for heading in ("## Tune this next", "## Incidents by symptom", "## Recurring root causes", "## Nodes that keep",
                    "## Versions seen", "## Changes recommended", "## Training stability", "## Throughput",
                    "## nccl-tests bus",
                    "## Unrecognised errors", "## Helpfulness"):
        assert heading in md
    assert "Precision from votes: 67% (2 of 3 rated answers marked helpful)" in md
    assert "| fork_enomem | 0 | 1 | 0% |" in md and "triage corpus export --feedback" in md
    assert f"#{ids['oom'][0]}" in md and "| cuda_oom | 3 | 1 | +200% |" in md
    assert sorted(p.name for p in rep.charts) == ["incidents_by_day.png", "nccl_tests.png", "root_causes.png",
                                                  "step_times.png"]   # the Megatron logs print step times
    assert "| job-b | 4.012 s | 4.012 s | 59 |" in md
    for p in rep.charts:
        assert _png_size(p) == (1000, 500)


def test_empty_period_has_no_data_sections(seeded, tmp_path):
    store, _ = seeded
    rep = report.make(store, NOW - timedelta(days=400), NOW - timedelta(days=300), tmp_path / "empty")
    md = rep.markdown_path.read_text()
    assert "No diagnoses were recorded" in md and "## Incidents" not in md and rep.charts == []


def test_post_through_fake_slack_and_schedule_fires_once(seeded, tmp_path):
    from slack_sdk import WebClient

    from testkit.fakeslack import FakeSlack
    store, _ = seeded
    fake = FakeSlack().start()
    try:
        client = WebClient(token="xoxb-r", base_url=fake.api)
        posted = []

        def job():
            rep = report.make(store, NOW - timedelta(days=7), NOW, tmp_path / "sched")
            report.post(client, "C_REPORT", rep)
            posted.append(rep)

        cron = Cron("0 9 * * 1", "Asia/Seoul")
        seoul_monday_0859 = datetime(2026, 11, 30, 8, 59, tzinfo=cron.tz)
        sched = Scheduler(cron, job, seoul_monday_0859)
        assert sched.due == datetime(2026, 11, 30, 9, 0, tzinfo=cron.tz)
        assert not sched.tick(seoul_monday_0859 + timedelta(seconds=30))
        assert sched.tick(seoul_monday_0859 + timedelta(minutes=1))
        assert not sched.tick(seoul_monday_0859 + timedelta(minutes=1, seconds=30))
        assert len(posted) == 1 and sched.due == datetime(2026, 12, 7, 9, 0, tzinfo=cron.tz)
        msg = fake.called("chat.postMessage")[0]
        assert msg["channel"] == "C_REPORT" and "Weekly tuning report" in msg["text"]
        assert len(fake.called("files.getUploadURLExternal")) == 5   # report.md and four charts
        assert len(fake.called("upload")) == 5
        done = fake.called("files.completeUploadExternal")
        assert len(done) == 1 and done[0]["channel_id"] == "C_REPORT"
        assert any(v.startswith(b"\x89PNG") for v in fake.uploads.values())
        assert any(v.startswith(b"# Train Triage weekly") for v in fake.uploads.values())
    finally:
        fake.stop()


def test_cron_parsing():
    c = Cron("*/15 9-17 * * 1-5", "UTC")
    assert c.next_after(datetime(2026, 11, 28, 12, 0, tzinfo=timezone.utc)) == datetime(2026, 11, 30, 9, 0, tzinfo=c.tz)
    for bad in ("0 9 * *", "61 9 * * 1", "0 9 * * 1 extra"):
        with pytest.raises(ValueError):
            Cron(bad)


def test_cli_record_then_report(tmp_path):
    import os
    env = {**os.environ, "TRIAGE_DB": str(tmp_path / "t.db")}
    # the bundled single-job logs (an archive, such as the two-node job's, gives one diagnosis per member)
    logs = [str(p) for p in sorted((ROOT / "examples").iterdir()) if p.is_file() and not p.name.endswith(".tar.gz")]
    r = subprocess.run([sys.executable, "-m", "bot.cli", "diagnose", "--record", *logs], capture_output=True, cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr.decode()
    r = subprocess.run([sys.executable, "-m", "bot.cli", "report", "--out", str(tmp_path / "rep")], capture_output=True,
                       cwd=ROOT, env=env)
    assert r.returncode == 0, r.stderr.decode()
    assert f"{len(logs)} diagnoses" in r.stdout.decode()
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "## Incidents by symptom" in md and (tmp_path / "rep" / "incidents_by_day.png").exists()
    r = subprocess.run([sys.executable, "-m", "bot.cli", "report", "--since", "yesterday-ish"], capture_output=True,
                       cwd=ROOT, env=env)
    assert r.returncode == 2 and "7d" in r.stderr.decode()


def test_slash_report_posts_files_to_the_channel(slack_bot):
    from conftest import FIXTURES as FX
    h = slack_bot()
    h.slash((FX / "gpu_xid" / "xid79.log").read_text())
    h.fake.wait(lambda: h.fake.responses)
    h.slash("report", channel="C1")
    done = h.fake.wait_calls("files.completeUploadExternal")
    assert done[0]["channel_id"] == "C1"


def test_report_lists_real_fixes_and_real_unknowns_only(seeded):
    store, _ = seeded
    r = report.build(store, NOW - timedelta(days=7), NOW)
    names = [c["name"] for c in r.changes]
    assert names and not {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "TORCH_NCCL_TRACE_BUFFER_SIZE"} & set(names)
    templates = " ".join(u["template"] for u in r.unclaimed)
    assert "Checkpoint shard" in templates
    assert "raise " not in templates and "exitcode" not in templates and "ChildFailedError" not in templates
    assert all(not t["text"].endswith(("…'", "'")) or " " in t["text"] for t in r.tune_next)


def test_an_env_hint_inside_an_error_message_is_not_the_jobs_env(run):
    d = run((F / "cuda_oom" / "new_format_fragmented.log").read_bytes())
    assert "PYTORCH_CUDA_ALLOC_CONF" not in (d.job.get("env") or {})
    d = run("+ export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n" +
            (F / "cuda_oom" / "new_format_fragmented.log").read_text())
    assert d.job["env"]["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"   # really set: recorded


def test_templates_are_cut_at_words():
    from core.templates import shorten
    s = shorten("RuntimeError: Checkpoint shard <n> failed to load from <path> because the filesystem went away", 60)
    assert len(s) <= 60 and s.endswith("…") and s[:-1] == s[:-1].rstrip() and "filesyst…" not in s


def test_tracebacks_source_lines_and_torchrun_summaries_are_not_unknown_errors(run):
    log = ("[rank3]: Traceback (most recent call last):\n"
           '[rank3]:   File "/app/train.py", line 41, in <module>\n'
           "[rank3]:     raise RuntimeError(f'shard {i} failed')\n"
           "[rank3]: RuntimeError: shard 17 failed to load from /fsx/ckpt/17.pt\n"
           "E1130 10:00:01.123000 4410 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: 1) "
           "local_rank: 3 (pid: 4413) of binary: /usr/bin/python3\n"
           "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
           "  exitcode  : 1 (pid: 4413)\n")
    templates = [u["template"] for u in run(log).unclaimed]
    assert len(templates) == 1 and templates[0].startswith("RuntimeError: shard <n> failed to load")


def test_feedback_exports_as_corpus_cases_that_eval_reads(seeded, tmp_path, engine):
    from bot.cli.corpus import feedback_cases
    from bot.cli.evaluate import evaluate
    store, ids = seeded
    cases = list(feedback_cases(store))
    assert [(c["id"], c["label"]) for c in cases] == [(f"feedback-{ids['fork']}", "nccl_error")]
    case = cases[0]
    assert "Cannot allocate memory" in case["text"] and "the bot said fork_enomem" in case["note"]
    assert not list(feedback_cases(store, NOW + timedelta(days=1)))   # --since after it: nothing
    sc = evaluate([json.dumps(case)], engine)   # the format triage eval reads; the bot still says fork_enomem
    assert sc.total == 1 and sc.wrong == [(case["id"], "nccl_error", "fork_enomem")]


def test_corpus_export_cli(tmp_path):
    env = {**os.environ, "TRIAGE_DB": str(tmp_path / "empty.db")}
    out = subprocess.run([sys.executable, "-m", "bot.cli", "corpus", "export", "--feedback", "--since", "7d"],
                         cwd=ROOT, capture_output=True, text=True, env=env)
    assert out.returncode == 0 and out.stdout == ""
    bad = subprocess.run([sys.executable, "-m", "bot.cli", "corpus", "export"], cwd=ROOT, capture_output=True,
                         text=True, env=env)
    assert bad.returncode == 2 and "--feedback" in bad.stderr


def test_step_time_per_job_over_time_healthy_runs_included(tmp_path, run):
    """Issue 15: every stored diagnosis with step times feeds the report's step-time table and chart."""
    from test_step_time import megatron
    store = Store(tmp_path / "s.db")
    for days_ago, text in ((3, megatron()), (1, megatron(slow_from=60, tflops=400.0, gpu="H100 80GB HBM3"))):
        d = run(text, "train.log")
        assert d.findings == []   # healthy runs: facts only
        store.record(d, text.encode(), job_key="job-s", at=(NOW - timedelta(days=days_ago)).isoformat())
    rep = report.make(store, NOW - timedelta(days=7), NOW, tmp_path / "out")
    rows = rep.data.step_times
    assert [(s["job"], s["slowdown_pct"] is None) for s in rows] == [("job-s", True), ("job-s", False)]
    assert all(0.98 < s["median_s"] < 1.25 for s in rows)
    md = rep.markdown_path.read_text()
    assert "## Step time and MFU per job" in md and "![Step time per job](step_times.png)" in md
    assert rows[0]["mfu_pct"] is None and 30 < rows[1]["mfu_pct"] < 42
    assert f"| {rows[1]['tflops_per_gpu']:g} | {rows[1]['mfu_pct']:g}% | #" in md
    assert (tmp_path / "out" / "step_times.png").read_bytes()[:4] == b"\x89PNG"


def test_an_alltoall_benchmark_is_shown_but_never_judged_against_the_ring_collectives_figure(tmp_path, run):
    """The expected bus bandwidth is for all_reduce / reduce_scatter / all_gather: an alltoall at 92 GB/s on two p5
    nodes is listed without a ratio and brings no "check EFA" action; the slow all_reduce beside it still does."""
    store = Store(tmp_path / "r.db")
    for name, job in (("alltoall_p5_two_nodes.log", "a2a"), ("all_reduce_p5_socket.log", "ar")):
        data = (F / "report" / name).read_bytes()
        store.record(run(data, name), data, source="cli", job_key=job,
                     at=(NOW - timedelta(days=1)).isoformat(timespec="seconds"))
    rep = report.make(store, NOW - timedelta(days=7), NOW, tmp_path / "out")
    bench = {b["op"]: b for b in rep.data.benchmarks}
    assert bench["alltoall"]["max_size_busbw"] == 91.94
    assert bench["alltoall"]["expected_busbw"] is None and bench["alltoall"]["ratio"] is None
    assert bench["all_reduce"]["expected_busbw"] == 400.0 and bench["all_reduce"]["ratio"] < 0.7
    actions = [t["text"] for t in rep.data.tune_next if "bus bandwidth" in t["text"]]
    assert len(actions) == 1 and actions[0].startswith("all_reduce on 2x p5")
    md = (tmp_path / "out" / "report.md").read_text()
    assert "| alltoall | 2 × p5 | 91.9 GB/s (8192 MiB) | – | – |" in md and "none for alltoall" in md



def test_report_lists_stragglers_and_pipeline_bubbles(tmp_path, run):
    """The slow family's newer symptoms reach the throughput section with their key number, and a straggler's host
    becomes a node to check."""
    store = Store(tmp_path / "s.db")
    for path, job, days in (("straggler/nvrx_two_ranks_one_node.log", "job-s", 1),
                            ("straggler/megatron_detector_throttled.log", "job-t", 2),
                            ("pipeline_bubble/megatron_pp4_m4.log", "job-p", 3)):
        data = (F / path).read_bytes()
        store.record(run(data, path), data, source="cli", job_key=job,
                     at=(NOW - timedelta(days=days)).isoformat(timespec="seconds"))
    r = report.make(store, NOW - timedelta(days=7), NOW, tmp_path / "out").data
    got = {(t["job"], t["symptom"]): (t["measure"], t["value"]) for t in r.throughput}
    assert got[("job-s", "straggler")] == ("slowest rank's score", 0.52)
    assert got[("job-t", "straggler")] == ("slowest rank % slower", 22.1)
    assert got[("job-p", "pipeline_bubble")] == ("pipeline bubble % of step", 42.9)
    node = next(n for n in r.nodes if n["host"] == "gpu-st-p5-002")
    assert "lagging" in node["roles"] and node["symptoms"]["straggler"] == 1


def test_report_lists_efa_channels_without_gpudirect_rdma(tmp_path, run):
    """slow_comm.no_gdrdma reaches the throughput section with its own measure (not a blank "None")."""
    import json
    case = json.loads((ROOT / "tests" / "corpus" / "wave12.jsonl").read_text().splitlines()[0])
    store = Store(tmp_path / "s.db")
    data = case["text"].encode()
    store.record(run(data, "p5.log"), data, source="cli", job_key="job-g",
                 at=(NOW - timedelta(days=1)).isoformat(timespec="seconds"))
    rep = report.make(store, NOW - timedelta(days=7), NOW, tmp_path / "out")
    got = {(t["job"], t["symptom"]): (t["measure"], t["value"]) for t in rep.data.throughput}
    assert got[("job-g", "slow_comm")] == ("EFA channels without GPUDirect RDMA", 5)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "EFA channels without GPUDirect RDMA 5" in md and "None" not in md


def test_configuration_hosts_are_not_drain_candidates_and_hardware_hosts_are(tmp_path, run):
    """Issue 30: a host named by two socket fallbacks has a setting to fix, not a node to drain."""
    store = Store(tmp_path / "c.db")
    tcp = (F / "tcp_fallback/env_dump.log").read_bytes()
    for i in range(2):
        store.record(run(tcp, "t.log"), tcp, source="cli", job_key=f"t{i}",
                     at=(NOW - timedelta(days=1 + i)).isoformat(timespec="seconds"))
    xid = (F / "gpu_xid/xid79.log").read_bytes()
    store.record(run(xid, "x.log"), xid, source="cli", job_key="x", at=(NOW - timedelta(days=1)).isoformat())
    from bot.report.data import CONFIGURATION, build
    assert "tcp_fallback" in CONFIGURATION and "gpu_xid" not in CONFIGURATION
    r = build(store, NOW - timedelta(days=7), NOW)
    assert r.nodes and all(set(n["symptoms"]) == {"gpu_xid"} for n in r.nodes)


def test_versions_equal_in_value_are_no_drift():
    from bot.report.data import ReportData
    from bot.report.markdown import render
    r = ReportData(NOW - timedelta(days=7), NOW)
    r.versions = {"libfabric": {"1.18": [1], "1.18.0": [2]}, "nccl": {"2.21.5": [1], "2.23.4": [2]}}
    text = render(r, [])
    assert "- libfabric: " in text and "- libfabric **drift**" not in text and "- nccl **drift**: " in text


def test_every_symptom_has_its_own_chart_colour():
    from bot.report.charts import symptom_colour
    from core import symptoms as S
    assert len({symptom_colour(s) for s in S.ids()}) == len(S.ids())


def test_a_line_todays_readers_recognise_is_not_listed_unrecognised_nor_made_a_rule(tmp_path, run):
    oom = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
           "79.11 GiB of which 1.06 GiB is free.")
    store = Store(tmp_path / "u.db")
    ck = "RuntimeError: Checkpoint shard 17 failed to load from /fsx/ckpt/step_1200/shard_17.pt\n"
    did = store.record(run(ck, "k.log"), ck.encode(), source="cli", job_key="k", at=(NOW - timedelta(days=1)).isoformat())
    # a row recorded before a parser learnt the line (written as an older version would have)
    store.db["unclaimed"].insert({**next(store.db.query("select * from unclaimed")), "template": oom,
                                  "example": oom, "diagnosis_id": did})
    from bot.report.data import build
    r = build(store, NOW - timedelta(days=7), NOW)
    assert [u for u in r.unclaimed if "Checkpoint shard" in u["template"]]
    assert not [u for u in r.unclaimed if "out of memory" in u["template"]]
    uid = next(store.db.query("select rowid from unclaimed where template = ?", [oom]))["rowid"]
    out = subprocess.run([sys.executable, "-m", "bot.cli", "rules", "new", "--from-unclaimed", str(uid)], cwd=ROOT,
                         capture_output=True, text=True, env={**os.environ, "TRIAGE_DB": str(tmp_path / "u.db"),
                                                              "TRIAGE_CACHE_DIR": str(tmp_path / "cache")})
    assert out.returncode == 2 and "recognised now (as cuda_oom)" in out.stderr and out.stdout == ""
