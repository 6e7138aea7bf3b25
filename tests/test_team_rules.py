"""Issue 18: a team's detection rules and symptoms in its playbook directory — no code — checked at load, taking
part in root-cause ordering, safe to change (triage eval reports answers they would break), and written from an
unrecognised error (`triage rules new --from-unclaimed`)."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import FIXTURES, ROOT

TEAM = FIXTURES / "team"
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of " \
      "79.11 GiB of which 1.50 GiB is free.\n"
LUSTRE = "Lustre: fsx-OST0001-osc-ffff9a: Connection to fsx-OST0001 (at 10.0.1.5@tcp) was lost; in progress\n"


def triage(tmp_path, *args, playbooks=None, stdin=None):
    env = {**os.environ, "TRIAGE_DB": str(tmp_path / "t.db"), "TRIAGE_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("TRIAGE_PLAYBOOKS", None)
    if playbooks:
        env["TRIAGE_PLAYBOOKS"] = str(playbooks)
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], cwd=ROOT, capture_output=True, text=True,
                          env=env, input=stdin, timeout=120)


def test_a_team_rule_finds_its_symptom_first_in_root_cause_order_with_facts_title_and_steps(tmp_path):
    out = triage(tmp_path, "diagnose", "--json", str(TEAM / "fsx_lost.txt"), playbooks=TEAM)
    assert out.returncode == 0, out.stderr
    f = json.loads(out.stdout)["findings"]
    assert [x["symptom"] for x in f] == ["fsx_lost", "nccl_timeout"]          # rank 3 before the hang it caused
    assert f[0]["rule"] == "team.fsx_lost" and f[0]["severity"] == "critical"
    assert f[0]["title"] == "Lustre lost its connection to fsx-OST0001 (1 times)"
    assert f[0]["facts"] == {"target": "fsx-OST0001-osc-ffff9a", "server": "fsx-OST0001", "nid": "10.0.1.5@tcp",
                             "count": 1}
    assert f[0]["steps"][0]["text"].startswith("Check the FSx mount on the node that lost fsx-OST0001")
    ko = triage(tmp_path, "diagnose", "--lang", "ko", str(TEAM / "fsx_lost.txt"), playbooks=TEAM).stdout
    assert "FSx for Lustre 연결 끊김" in ko or "fsx_lost" in ko
    # without the team's directory the same log is the hang alone
    plain = json.loads(triage(tmp_path, "diagnose", "--json", str(TEAM / "fsx_lost.txt")).stdout)["findings"]
    assert [x["symptom"] for x in plain] == ["nccl_timeout"]


def test_a_line_with_the_literal_that_does_not_match_the_pattern_is_no_finding(tmp_path):
    near = "Lustre: fsx-OST0001-osc-ffff9a: Connection restored to fsx-OST0001 (at 10.0.1.5@tcp)\n"
    out = triage(tmp_path, "diagnose", "--json", "-", playbooks=TEAM, stdin=near)
    assert json.loads(out.stdout)["findings"] == []


@pytest.mark.parametrize("edit, field", [
    (lambda y: y.replace("(?P<target>[\\w-]+)", "(?P<target>[\\w-]+"), "rules[0].pattern: not a valid regular"),
    (lambda y: y.replace("    symptom: fsx_lost\n    pattern", "    symptom: fsx_lots\n    pattern"),
     "rules[0].symptom: unknown symptom 'fsx_lots' (did you mean fsx_lost?)"),
    (lambda y: y.replace("pattern: 'Lustre:", "pattern: '(?i)lustre:"), "rules[0].pattern: no fixed text"),
    (lambda y: y.replace("  - id: fsx_lost\n", "  - id: cuda_oom\n"), "symptoms[0].id: symptom 'cuda_oom' is already"),
    (lambda y: y.replace("title: \"Lustre", "titel: \"Lustre"), "rules.0"),
])
def test_a_bad_rule_file_is_one_line_naming_file_and_field_and_exit_2(tmp_path, edit, field):
    d = tmp_path / "pb"
    d.mkdir()
    (d / "fsx.yaml").write_text(edit((TEAM / "fsx.yaml").read_text()))
    out = triage(tmp_path, "diagnose", str(TEAM / "fsx_lost.txt"), playbooks=d)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert str(d / "fsx.yaml") in out.stderr and field in out.stderr, out.stderr


def test_the_same_rule_id_in_two_files_is_refused(tmp_path):
    d = tmp_path / "pb"
    d.mkdir()
    shutil.copy(TEAM / "fsx.yaml", d / "a.yaml")
    (d / "b.yaml").write_text("rules:\n  - id: team.fsx_lost\n    symptom: cuda_oom\n    pattern: 'Lustre: x'\n"
                              "    title: again\n")
    out = triage(tmp_path, "diagnose", str(TEAM / "fsx_lost.txt"), playbooks=d)
    assert out.returncode == 2 and "rule id 'team.fsx_lost' is already used" in out.stderr


def test_eval_reports_a_rule_that_breaks_an_answer_that_was_right(tmp_path):
    cases = tmp_path / "cases.jsonl"
    cases.write_text("\n".join(json.dumps(c) for c in (
        {"id": "lustre", "label": "fsx_lost", "text": LUSTRE},
        {"id": "oom", "label": "cuda_oom", "text": OOM + LUSTRE}, )) + "\n")
    safe = triage(tmp_path, "eval", str(cases), playbooks=TEAM)
    assert safe.returncode == 0 and "no answer that was right without them changes" in safe.stdout
    d = tmp_path / "pb"
    d.mkdir()
    (d / "fsx.yaml").write_text((TEAM / "fsx.yaml").read_text().replace("rank: 3", "rank: 0"))
    risky = triage(tmp_path, "eval", str(cases), playbooks=d)
    assert risky.returncode == 1
    assert "oom: was cuda_oom (right), now fsx_lost from rule team.fsx_lost" in risky.stdout


def test_rules_new_writes_a_rule_from_an_unrecognised_error_that_then_finds_it(tmp_path):
    log = tmp_path / "job.log"
    log.write_text("step 1 ok\nRuntimeError: shard 3 failed to load from /fsx/ckpt/a.bin after 2 tries\n")
    assert triage(tmp_path, "diagnose", "--record", str(log)).returncode == 0
    from bot.store.store import Store
    uid = next(Store(tmp_path / "t.db").db.query("select rowid from unclaimed"))["rowid"]
    missing = triage(tmp_path, "rules", "new", "--from-unclaimed", "999")
    assert missing.returncode == 2 and "no unrecognised error 999" in missing.stderr
    d = tmp_path / "pb"
    made = triage(tmp_path, "rules", "new", "--from-unclaimed", str(uid), "--dir", str(d))
    assert made.returncode == 0, made.stderr
    assert (d / "team_runtimeerror_shard_failed_load_from.runbook.md").exists()
    again = triage(tmp_path, "rules", "new", "--from-unclaimed", str(uid), "--dir", str(d))
    assert again.returncode == 2 and "not overwritten" in again.stderr
    other = tmp_path / "other.log"
    other.write_text("RuntimeError: shard 17 failed to load from /fsx/ckpt/b.bin after 5 tries\n")
    f = json.loads(triage(tmp_path, "diagnose", "--json", str(other), playbooks=d).stdout)["findings"]
    assert f[0]["symptom"] == "team_runtimeerror_shard_failed_load_from"
    assert f[0]["title"] == "RuntimeError: shard 17 failed to load from /fsx/ckpt/b.bin after 5 tries (1 lines)"
    assert f[0]["steps"][0]["cite"] == ["collaboration#timeline-crosscheck"]


def test_the_scanner_literal_is_the_longest_fixed_run():
    from playbooks.rules import literal_of
    assert literal_of(r"Lustre: (?P<t>[\w-]+): Connection to (?P<s>\S+) \(at") == ": Connection to "
    assert literal_of(r"xid (?P<n>\d+) on GPU") == " on GPU"
    assert literal_of(r"(?:foo|bar) \d+") is None and literal_of(r"(?i)connection lost") is None
    assert literal_of(r"abc+d") == "abc" and literal_of(r"ab+c") is None   # a run needs 3 characters


def test_a_team_symptom_can_be_picked_on_a_thumbs_down():
    from bot.slack.blocks import symptom_choices
    from core import symptoms
    symptoms.register(symptoms.Symptom("team_probe_x", symptoms.TEAM, "error", 20, "Probe", "Probe", ("count",)))
    try:
        assert "team_probe_x" in symptom_choices() and symptom_choices()[-1] == "none"
    finally:
        symptoms._ALL.pop("team_probe_x")
