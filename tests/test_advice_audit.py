"""An audit of every answer the bot gives on its own fixtures and on the whole project corpus (issue 14): no change
outside its seed row's version or instance condition, no no-op, no value the log did not show as 'from', and no
setting named in another framework's vocabulary than the one the log shows."""
import json

import pytest

from conftest import FIXTURES, ROOT
from core import frameworks as FW
from core import versions as V

P4_P5 = {"p4d", "p4de", "p5", "p5e", "p5en"}


def _inputs():
    for path in sorted(FIXTURES.rglob("*.log")):
        yield path.read_bytes()
    for path in sorted((ROOT / "tests" / "corpus").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                yield json.loads(line)["text"].encode()


def _rule(d, rule_id):
    return V.BY_ID[rule_id].holds(d.versions)


def _problems(d):
    job, out = d.job, []
    family = job.get("instance_family")
    own = {n.name for n in (FW.name_for(c, job.get("framework"), job.get("sharding_engine")) for c in FW.VOCAB) if n}
    foreign = {n.name for table in FW.VOCAB.values() for n in table.values()} - own
    for f in d.findings:
        for s in f.steps:
            for c in s.changes:
                where = f"{f.symptom}/{s.id}: {c.kind} {c.name} {c.from_} -> {c.to}"
                if c.kind != "command" and c.from_ is not None and str(c.from_).lower() == str(c.to).lower():
                    out.append("no-op " + where)
                if c.from_ is not None and c.kind == "env" and str(job.get("env", {}).get(c.name)) != str(c.from_):
                    out.append("'from' not in the log " + where)
                if c.kind == "env" and c.name == "FI_EFA_SET_CUDA_SYNC_MEMOPS" and c.to is not None \
                        and _rule(d, "efa_sync_memops") is not True:
                    out.append("outside efa-installer < 1.29.1 and NCCL >= 2.19 " + where)
                if c.kind == "env" and c.name in ("FI_PROVIDER", "NCCL_PROTO") and c.to is not None and (
                        _rule(d, "ofi_needs_provider") is not True or family not in P4_P5):
                    out.append("outside aws-ofi-nccl <= 1.5.0 on p4/p5 " + where)
                if c.kind == "env" and c.name == "NCCL_SOCKET_IFNAME" and c.to == "en" and family not in P4_P5:
                    out.append("en outside p4d/p5 " + where)
                if c.kind == "env" and c.name == "NCCL_SOCKET_IFNAME" and "NCCL_SOCKET_IFNAME" in job.get("env", {}):
                    out.append("overrides the job's own interface " + where)
                if c.kind == "env" and c.name == "NCCL_SHM_USE_CUDA_MEMCPY" and not str(family).startswith(("g5", "g6")):
                    out.append("outside g5/g6 " + where)
                if c.kind == "env" and c.to is None and c.name == "FI_EFA_FORK_SAFE" and _rule(d, "fork_safe_unneeded") is not True:
                    out.append("removed below kernel 5.15 " + where)
                if c.kind == "env" and c.name.startswith("RDMAV_") and c.to is not None:
                    out.append("sets an RDMAV_ variable " + where)
                if c.kind == "env" and c.name == "NCCL_BUFFSIZE" and c.from_ in ("4194304", "8388608"):
                    out.append("'fixes' a recommended buffer size " + where)
                if job.get("framework") and c.name in foreign:
                    out.append(f"another framework's name ({job['framework']}) " + where)
    return out


def test_every_answer_on_fixtures_and_corpus_stays_inside_the_seed_rows(engine):
    from core.ingest import from_bytes
    problems, answers = [], 0
    for data in _inputs():
        d = engine.diagnose(from_bytes(data, "case"))
        answers += bool(d.findings)
        problems += _problems(d)
    assert answers > 300
    assert problems == []


@pytest.mark.parametrize("log,why", [
    ("h:1:1 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\n", "never flags a job's own interface"),
])
def test_the_audit_itself_fires_on_a_bad_answer(engine, log, why):
    """A hand-made wrong answer is caught: the audit is not vacuous."""
    from core.ingest import from_bytes
    from core.models import Change
    d = engine.diagnose(from_bytes(("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n"
                                    + log).encode(), "case"))
    d.findings[0].steps[0].changes.append(Change(kind="env", name="NCCL_SOCKET_IFNAME", to="en"))
    d.findings[0].steps[0].changes.append(Change(kind="env", name="FI_PROVIDER", to="efa"))
    d.findings[0].steps[0].changes.append(Change(kind="env", name="NCCL_BUFFSIZE", from_="8388608", to=4194304))
    kinds = {p.split(" cuda_oom/")[0] for p in _problems(d)}
    assert {"en outside p4d/p5", "overrides the job's own interface", "outside aws-ofi-nccl <= 1.5.0 on p4/p5",
            "'fixes' a recommended buffer size", "'from' not in the log"} == kinds, why
