"""Playbooks are data: validated at load, every citation is a real runbook section, each fires on a fixture."""
import textwrap

import pytest

from conftest import FIXTURES
from knowledge.runbook import load as load_runbook
from playbooks.engine import PlaybookError, load


def test_every_cite_resolves_to_a_runbook_section(books):
    rb = load_runbook()
    cites = {c for b in books for s in b.playbook["steps"] for c in s["cite"]}
    assert len(cites) > 40
    missing = sorted(c for c in cites if c not in rb)
    assert missing == []


def test_every_symptom_has_a_playbook_and_each_playbook_fires_on_a_fixture(books, run):
    """Fixtures live in tests/fixtures/<symptom>/: each playbook gives a step to a fixture of one of its symptoms."""
    from core.models import SYMPTOMS

    def symptoms(b):
        pb = b.playbook
        return pb["symptom"] if isinstance(pb["symptom"], list) else [pb["symptom"]]
    assert {s for b in books for s in symptoms(b)} == set(SYMPTOMS)
    for b in books:
        mine = {s["id"] for s in b.playbook["steps"]}
        fired = False
        for sym in symptoms(b):
            for path in sorted((FIXTURES / sym).glob("*.log")):
                d = run(path.read_bytes())
                fired |= any(s.id in mine for f in d.findings if f.symptom in symptoms(b) for s in f.steps)
        assert fired, f"{b.path.name}: no fixture of {symptoms(b)} gets a step from this playbook"


def test_bad_playbook_fails_loudly_naming_file_and_field(tmp_path):
    (tmp_path / "mine.yaml").write_text(textwrap.dedent("""
        playbooks:
          - symptom: cuda_oom
            steps:
              - id: x
                owner: ml
                txt: typo
                cite: [oom#micro-batch]
    """))
    with pytest.raises(PlaybookError) as e:
        load([tmp_path])
    assert "mine.yaml" in str(e.value) and "txt" in str(e.value)


def test_user_playbook_dir_overrides_and_adds_steps(tmp_path, run):
    (tmp_path / "team.yaml").write_text(textwrap.dedent("""
        playbooks:
          - symptom: fork_enomem
            steps:
              - id: fork_enomem.team_first
                owner: infra
                text: Page the on-call for node {facts.count}.
                cite: [efa#fork-huge-pages]
              - id: fork_enomem.huge_pages
                owner: infra
                text: Our AMI already sets it; check the job script instead.
                cite: [efa#env-vars]
    """))
    from core.ingest import from_bytes
    from engine import Engine
    d = Engine(load([tmp_path])).diagnose(from_bytes((FIXTURES / "fork_enomem" / "dataloader.log").read_bytes()))
    ids = [s.id for s in d.findings[0].steps]
    assert ids[:2] == ["fork_enomem.team_first", "fork_enomem.huge_pages"]
    assert d.findings[0].steps[0].text == "Page the on-call for node 1."
    assert d.findings[0].steps[1].changes == []


def test_version_condition_skips_workaround_on_new_efa_installer(run):
    text = (FIXTURES / "efa_mr_registration" / "rail_rc22.log").read_text()
    d = run(text.replace("1.28.0", "1.30.0"))
    ids = [s.id for s in d.findings[0].steps]
    assert "efa_mr.sync_memops_workaround" not in ids
    d = run(text.replace("# EFA installer version: 1.28.0\n", ""))
    step = next(s for s in d.findings[0].steps if s.id == "efa_mr.sync_memops_workaround")
    assert step.changes[0].name == "cat /opt/amazon/efa_installed_packages"


def test_micro_batch_one_is_not_halved(run):
    text = (FIXTURES / "cuda_oom" / "new_format_fragmented.log").read_text()
    d = run(text.replace("micro_batch_size ................................ 4",
                         "micro_batch_size ................................ 1"))
    assert "cuda_oom.halve_micro_batch" not in [s.id for s in d.findings[0].steps]


def test_runbook_search_answers_questions_and_survives_fts_syntax():
    rb = load_runbook()
    assert rb.search("allreduce is slow, pipeline bubble")[0].id.startswith("performance#")
    assert rb.search("fork cannot allocate memory huge pages")[0].id == "efa#fork-huge-pages"
    assert rb.search('"unbalanced AND (OR NEAR* ^') is not None
    assert rb.search("") == []


def test_user_playbook_citing_a_missing_section_is_refused_at_start(tmp_path):
    import os
    import subprocess
    import sys

    from conftest import ROOT
    (tmp_path / "t.yaml").write_text(textwrap.dedent("""
        playbooks:
          - symptom: gpu_xid
            steps:
              - id: gpu_xid.mine
                owner: infra
                text: Call the vendor.
                cite: [gpu#no-such-section]
    """))
    r = subprocess.run([sys.executable, "-m", "bot.cli", "diagnose", str(FIXTURES / "gpu_xid" / "xid79.log")],
                       capture_output=True, cwd=ROOT, env={**os.environ, "TRIAGE_PLAYBOOKS": str(tmp_path)})
    assert r.returncode == 2 and "gpu#no-such-section" in r.stderr.decode()


@pytest.mark.parametrize("field, value, said", [
    ("symptom", "cuda_oomm", "unknown symptom 'cuda_oomm' (did you mean cuda_oom?)"),
    ("when", "[{path: facts.tried_gb, op: gt, value: 1}]",
     "'facts.tried_gb': cuda_oom findings carry no fact 'tried_gb' (did you mean tried_gib?)"),
    ("when", "[{path: job.micro_batch, op: exists}]", "'job.micro_batch': no job setting 'micro_batch' (did you mean "
                                                      "micro_batch_size?)"),
    ("when", "[{path: versions.ncl, op: ge, value: '2.19'}]", "no version 'ncl' (did you mean nccl?)"),
    ("when", "[{path: version_rules.efa_sync, op: eq, value: true}]", "no version rule 'efa_sync'"),
    ("cite", "[oom#micro-batches]", "'oom#micro-batches' is not a runbook section (did you mean oom#micro-batch?)"),
    ("text", "Halve {job.micro_batch_sz}.", "'job.micro_batch_sz': no job setting"),
])
def test_a_playbook_naming_what_does_not_exist_fails_at_load(tmp_path, field, value, said):
    """The README's promise: a typo in a symptom, a path or a citation stops start-up with file, field and the
    nearest valid name, instead of loading a playbook that never fires."""
    step = {"when": "[]", "cite": "[oom#micro-batch]", "text": "Halve it."}
    symptom = value if field == "symptom" else "cuda_oom"
    if field != "symptom":
        step[field] = value
    (tmp_path / "team.yaml").write_text(textwrap.dedent(f"""
        playbooks:
          - symptom: {symptom}
            steps:
              - id: team.one
                owner: ml
                text: "{step['text']}"
                when: {step['when']}
                cite: {step['cite']}
    """))
    with pytest.raises(PlaybookError) as e:
        load([tmp_path])
    msg = str(e.value)
    assert msg.startswith(str(tmp_path / "team.yaml")) and said in msg and "playbooks[0]" in msg


def test_every_built_in_playbook_passes_the_same_load_time_check():
    from playbooks.check import Checker
    from playbooks.engine import BUILTIN, _validate
    for path in sorted(BUILTIN.glob("*.yaml")):
        assert Checker().file(_validate(path, path.read_bytes())) is None, path


def test_a_user_playbook_with_a_near_miss_path_that_exists_loads(tmp_path):
    """job.env.ANY is open (any variable the log shows), and facts of any of the listed symptoms are allowed."""
    (tmp_path / "ok.yaml").write_text(textwrap.dedent("""
        playbooks:
          - symptom: [nccl_timeout, tcp_fallback]
            steps:
              - id: team.env
                owner: infra
                when: [{path: job.env.MY_TEAM_VAR, op: exists}, {path: facts.socket_hosts, op: nonempty}]
                text: "Lagging {facts.lagging_hosts}"
                cite: [hangs#debug-logging]
    """))
    assert any(b.path.name == "ok.yaml" for b in load([tmp_path]))


def _team_playbook(text="Page the on-call."):
    return textwrap.dedent(f"""
        playbooks:
          - symptom: fork_enomem
            steps:
              - id: fork_enomem.team_first
                owner: infra
                text: {text}
                cite: [efa#fork-huge-pages]
    """)


def test_cached_playbooks_are_the_validated_ones(tmp_path, books):
    cache = tmp_path / "cache"
    cold = load(cache=cache)
    assert len(list(cache.glob("*.json"))) == len({b.path for b in books})
    warm = load(cache=cache)
    assert [(b.path, b.playbook) for b in warm] == [(b.path, b.playbook) for b in cold] \
        == [(b.path, b.playbook) for b in books]


def test_an_edited_playbook_is_validated_again_even_with_a_warm_cache(tmp_path):
    team, cache = tmp_path / "team", tmp_path / "cache"
    team.mkdir()
    (team / "t.yaml").write_text(_team_playbook())
    assert load([team], cache=cache)[0].playbook["steps"][0]["text"] == "Page the on-call."
    (team / "t.yaml").write_text(_team_playbook("Drain the node.").replace("owner: infra", "owner: nobody"))
    with pytest.raises(PlaybookError) as e:
        load([team], cache=cache)
    assert "t.yaml" in str(e.value) and "owner" in str(e.value)
    (team / "t.yaml").write_text(_team_playbook("Drain the node."))
    assert load([team], cache=cache)[0].playbook["steps"][0]["text"] == "Drain the node."


def test_a_corrupt_or_unwritable_cache_only_costs_time(tmp_path, books):
    cache = tmp_path / "cache"
    load(cache=cache)
    for f in cache.glob("*.json"):
        f.write_text('{"playbooks": [' if f.name < "8" else "[]")
    assert [b.playbook for b in load(cache=cache)] == [b.playbook for b in books]
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    assert [b.playbook for b in load(cache=blocked / "cache")] == [b.playbook for b in books]


def test_a_warm_diagnose_imports_neither_pydantic_nor_yaml_nor_the_interfaces(tmp_path):
    """Issue 6: a one-shot `triage diagnose` pays only for what it uses."""
    import json
    import os
    import subprocess
    import sys

    from conftest import ROOT
    env = {**os.environ, "TRIAGE_CACHE_DIR": str(tmp_path)}
    probe = ("import sys, runpy; sys.argv = ['triage', 'diagnose', '--json', sys.argv[1]]\n"
             "try:\n    runpy.run_module('bot.cli', run_name='__main__')\nexcept SystemExit:\n    pass\n"
             "heavy = ('pydantic', 'yaml', 'slack_bolt', 'slack_sdk', 'langchain', 'langchain_core', 'matplotlib',"
             " 'sqlite_utils')\nprint(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)")
    log = str(FIXTURES / "cuda_oom" / "new_format_fragmented.log")
    runs = [subprocess.run([sys.executable, "-c", probe, log], capture_output=True, cwd=ROOT, env=env, text=True)
            for _ in range(2)]
    cold, warm = (r.stderr.strip().splitlines()[-1] for r in runs)
    assert "pydantic" in cold and "yaml" in cold     # the first run validates the playbooks
    assert warm == "[]"
    assert json.loads(runs[1].stdout)["findings"][0]["symptom"] == "cuda_oom"


def test_the_runbook_shows_the_version_rules_the_code_applies(tmp_path):
    """The rules live once (core/versions.py); the runbook's block is generated from them (`make runbook`)."""
    import shutil

    from core.versions import runbook_block
    from knowledge.runbook import HERE, sync_generated
    assert runbook_block() in (HERE / "efa.md").read_text(encoding="utf-8")
    copy = tmp_path / "kb"
    shutil.copytree(HERE, copy, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    md = copy / "efa.md"
    md.write_text(md.read_text().replace("libfabric < 1.17", "libfabric < 1.16"))
    assert sync_generated(str(copy)) is True and runbook_block() in md.read_text()
    assert sync_generated(str(copy)) is False


def test_no_change_is_a_no_op_or_given_twice_in_one_answer(run):
    """The log shows NCCL_BUFFSIZE already at the value the OOM-in-NCCL step would set: that change is left out;
    and no (kind, name, value) appears in two steps of one finding."""
    text = (FIXTURES / "cuda_oom" / "nccl_oom.log").read_text() if (FIXTURES / "cuda_oom" / "nccl_oom.log").exists() \
        else "init.cc:218 NCCL WARN Cuda failure 'out of memory'\n"
    d = run("NCCL_BUFFSIZE=4194304\n" + text)
    changes = [(c.kind, c.name, c.from_, c.to) for s in d.findings[0].steps for c in s.changes]
    assert not any(name == "NCCL_BUFFSIZE" and str(f) == str(t) for _, name, f, t in changes)
    for path in sorted(FIXTURES.rglob("*.log")):
        for f in run(path.read_bytes()).findings:
            keys = [(c.kind, c.name, str(c.to)) for s in f.steps for c in s.changes]
            assert len(keys) == len(set(keys)), (path, keys)
            assert not any(c.from_ is not None and str(c.from_) == str(c.to) for s in f.steps for c in s.changes
                           if c.kind != "command"), path


def test_buffsize_of_4_or_8_mib_is_left_alone_and_another_value_is_not(run):
    log = "NCCL_BUFFSIZE={}\nNET/OFI Unable to register memory (type = 2) for device 4. RC: -22, Error: Invalid argument\n"
    steps = {v: [s.id for s in run(log.format(v)).findings[0].steps] for v in ("4194304", "8388608", "33554432")}
    assert "efa_env.buffsize" not in steps["4194304"] and "efa_env.buffsize" not in steps["8388608"]
    assert "efa_env.buffsize" in steps["33554432"]


MEGATRON_OOM = ("------------------------ arguments ------------------------\n"
                "  micro_batch_size ................................ 2\n"
                "  recompute_granularity ........................... {gran}\n"
                "  use_distributed_optimizer ....................... {distopt}\n"
                "-------------------- end of arguments ---------------------\n"
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.00 GiB. GPU 0 has a total capacity of "
                "79.11 GiB of which 1.20 GiB is free. Including non-PyTorch memory, this process has 77.90 GiB memory "
                "in use. Of the allocated memory 76.10 GiB is allocated by PyTorch, and 0.31 GiB is reserved by "
                "PyTorch but unallocated.\n")


def _changes_of(d):
    return {(c.name, c.from_, c.to) for s in d.findings[0].steps for c in s.changes}


def test_megatron_gets_its_next_rung_not_deepspeed_advice(run):
    d = run(MEGATRON_OOM.format(gran="selective", distopt="False"))
    got = _changes_of(d)
    assert ("--recompute-granularity", "selective", "full") in got and ("--recompute-activations", None, True) not in got
    assert ("--use-distributed-optimizer", None, True) in got
    assert not any(name.startswith("zero_optimization") for name, _, _ in got)
    got = _changes_of(run(MEGATRON_OOM.format(gran="None", distopt="True")))   # already sharded, no selective
    assert not any(name.startswith("zero_optimization") or name == "--use-distributed-optimizer" for name, _, _ in got)
