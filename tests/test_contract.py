"""The JSON contract (DESIGN.md): what `diagnose --json` prints is what the store reads back, and nothing else."""
import json

import pytest

from conftest import FIXTURES
from core.models import SCHEMA, Change, Diagnosis, Evidence, Finding, InputInfo, Step


def test_a_real_diagnosis_survives_the_store_round_trip(run):
    d = run((FIXTURES / "nccl_timeout" / "lagging_rank.log").read_bytes())
    doc = d.to_json_dict()
    again = Diagnosis.from_dict(json.loads(json.dumps(doc)))
    assert again.to_json_dict() == doc
    assert list(doc) == ["schema", "input", "versions", "job", "findings", "benchmarks", "unclaimed",
                         "step_time"]
    assert doc["schema"] == SCHEMA and doc["findings"][0]["symptom"] == "nccl_timeout"
    assert "first_line" not in doc["findings"][0]


def test_optional_keys_are_left_out_and_from_is_spelled_as_in_the_contract():
    c = Change(kind="env", name="NCCL_DEBUG", to="INFO")
    assert c.to_dict() == {"kind": "env", "name": "NCCL_DEBUG", "to": "INFO"}
    c = Change(kind="flag", name="--micro-batch-size", to=2, from_=4, note="halved")
    assert c.to_dict() == {"kind": "flag", "name": "--micro-batch-size", "to": 2, "from": 4, "note": "halved"}
    assert Change.from_dict(c.to_dict()) == c
    f = Finding(symptom="cuda_oom", rule="r", title="t", severity="error", confidence=0.9)
    assert "caused_by" not in f.to_dict()


def test_the_dump_does_not_alias_the_live_diagnosis():
    f = Finding(symptom="cuda_oom", rule="r", title="t", severity="error", confidence=0.9,
                facts={"ranks": [1, 2]}, evidence=[Evidence(line=1, text="x")])
    d = Diagnosis(input=InputInfo(name="p", bytes=1, lines=1), findings=[f])
    d.to_json_dict()["findings"][0]["facts"]["ranks"].append(3)
    assert f.facts["ranks"] == [1, 2]


@pytest.mark.parametrize("make", [
    lambda: Finding(symptom="cuda_oom", rule="r", title="t", severity="fatal", confidence=0.9),
    lambda: Step(id="s", owner="ops", text="t"),
    lambda: Change(kind="sysctl", name="x"),
    lambda: Diagnosis.from_dict({"schema": SCHEMA, "input": {"name": "p", "bytes": 1, "lines": 1}, "extra": 1}),
    lambda: Diagnosis.from_dict({"schema": "triage.diagnosis/v0", "input": {"name": "p", "bytes": 1, "lines": 1}}),
    lambda: Finding.from_dict({"symptom": "x", "rule": "r", "title": "t", "severity": "error", "confidence": 1,
                               "evidnce": []}),
])
def test_values_outside_the_contract_are_refused(make):
    with pytest.raises((ValueError, TypeError)):
        make()


def test_store_schema_comes_from_migrations_only(tmp_path, run):
    """The llm_outcome column is a migration (not added on first use), and an old database that already has it
    from the former alter=True path migrates cleanly."""
    import sqlite3

    from bot.store.store import Store
    from conftest import FIXTURES
    fresh = Store(tmp_path / "new.db")
    assert "llm_outcome" in fresh.db["diagnoses"].columns_dict
    did = fresh.record(run((FIXTURES / "gpu_xid" / "xid79.log").read_bytes()))
    fresh.llm_log(diagnosis_id=did, model="m", lang="en", prompt="p", response="r", outcome="accepted", ms=1,
                  cache_key=None, answer=None)
    assert fresh.get(did)["llm_outcome"] == "accepted"
    fresh.db.execute("delete from _sqlite_migrations where name = 'm005_llm_outcome'")
    fresh.db.conn.commit()
    again = Store(tmp_path / "new.db")   # the column exists already: the migration must not fail
    assert again.get(did)["llm_outcome"] == "accepted"
    assert sqlite3.connect(tmp_path / "new.db").execute("pragma integrity_check").fetchone()[0] == "ok"
