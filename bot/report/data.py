"""Everything the weekly report says, computed from the store. Each figure keeps the diagnosis ids behind it."""
from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from bot.report.fleet import fleet_view
from bot.store.store import Store, load_doc
from core import facts as F
from core import instances as I
from core import job as J
from core import symptoms as S
from core import versions as V
from core.templates import shorten

SEVERITY_WEIGHT = {"critical": 3, "error": 2, "warning": 1}
DIAGNOSTIC = frozenset({"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "TORCH_NCCL_TRACE_BUFFER_SIZE",
                        "TORCH_NCCL_DUMP_ON_TIMEOUT", "TORCH_DISTRIBUTED_DEBUG", "CUDA_LAUNCH_BLOCKING"})
HARDWARE = S.in_group(S.HARDWARE)
TRAINING = S.in_group(S.TRAINING)
ROUTING = S.in_group(S.ROUTING)
THROUGHPUT = S.in_group(S.THROUGHPUT)
CONFIGURATION = S.in_group(S.CONFIGURATION)
# the one number that says how slow, per throughput symptom: (fact, label)
_SLOW_MEASURE = (("mfu_pct", "MFU %"), ("util_pct", "GPU util %"), ("ratio_pct", "busbw % of expected"),
                 ("comm_share_pct", "NCCL % of CUDA time"), ("input_share_pct", "input % of step"),
                 ("slowdown_pct", "slowest rank % slower"), ("score", "slowest rank's score"),
                 ("below_median_pct", "sniff test: % below the median"),
                 ("bubble_pct", "pipeline bubble % of step"),
                 ("net_channel_lines", "EFA channels without GPUDirect RDMA"))


def parse_since(text: str, now: datetime) -> datetime:
    m = re.fullmatch(r"(\d+)\s*([hdw])", text.strip())
    if m:
        n, unit = int(m.group(1)), m.group(2)
        try:
            return now - {"h": timedelta(hours=n), "d": timedelta(days=n), "w": timedelta(weeks=n)}[unit]
        except (OverflowError, ValueError):
            raise ValueError(f"'{text}' reaches back before the year 1; use a shorter span or a date") from None
    return parse_date(text)


def parse_date(text: str) -> datetime:
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"'{text}' is neither a duration like 7d/24h/2w nor a date like 2026-11-23") from None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def _iso(dt: datetime) -> str:
    return dt.astimezone(timezone.utc).isoformat(timespec="seconds")


@dataclass
class ReportData:
    since: datetime
    until: datetime
    total: int = 0
    previous_total: int = 0
    by_day: dict[str, Counter] = field(default_factory=dict)
    by_symptom: Counter = field(default_factory=Counter)
    previous_by_symptom: Counter = field(default_factory=Counter)
    root_causes: list[dict[str, Any]] = field(default_factory=list)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    versions: dict[str, dict[str, list[int]]] = field(default_factory=dict)
    version_warnings: list[dict[str, Any]] = field(default_factory=list)
    changes: list[dict[str, Any]] = field(default_factory=list)
    loss: list[dict[str, Any]] = field(default_factory=list)
    throughput: list[dict[str, Any]] = field(default_factory=list)
    step_times: list[dict[str, Any]] = field(default_factory=list)   # each diagnosis' step-time facts, per job
    moe: list[dict[str, Any]] = field(default_factory=list)
    benchmarks: list[dict[str, Any]] = field(default_factory=list)
    unclaimed: list[dict[str, Any]] = field(default_factory=list)
    votes: Counter = field(default_factory=Counter)
    precision: dict[str, list[int]] = field(default_factory=dict)   # symptom said -> [answers 👍, answers rated]
    wrong: list[dict[str, Any]] = field(default_factory=list)
    tune_next: list[dict[str, Any]] = field(default_factory=list)
    unreadable: list[int] = field(default_factory=list)   # diagnoses whose stored JSON is damaged: left out
    channels: tuple[str, ...] | None = None   # the report covers only these channels' diagnoses (None: all)
    fleet: list[dict[str, Any]] = field(default_factory=list)   # per SOURCE of `triage fleet --record`


def _scope(channels: tuple[str, ...] | None) -> tuple[str, list[str]]:
    """SQL (and its arguments) that keeps only the rows of the given channels; nothing when channels is None."""
    if channels is None:
        return "", []
    marks = ", ".join("?" for _ in channels) or "''"
    return f" and channel in ({marks})", list(channels)


def build(store: Store, since: datetime, until: datetime, channels: tuple[str, ...] | None = None) -> ReportData:
    """The report over [since, until]; with `channels` only the diagnoses made in those channels (a report asked
    for in one channel must not show another's, private ones least of all)."""
    r = ReportData(since, until, channels=channels)
    span = until - since
    where, scope = _scope(channels)
    rows = list(store.db.query(f"select * from diagnoses where created_at >= ? and created_at <= ?{where} order by id",
                               [_iso(since), _iso(until), *scope]))
    prev = list(store.db.query(f"select top_symptom from diagnoses where created_at >= ? and created_at < ?{where}",
                               [_iso(since - span), _iso(since), *scope]))
    r.total, r.previous_total = len(rows), len(prev)
    r.previous_by_symptom = Counter(p["top_symptom"] for p in prev if p["top_symptom"] != "none")
    docs = {row["id"]: load_doc(row["diagnosis_json"], row["id"]) for row in rows}
    r.unreadable = sorted(i for i, doc in docs.items() if doc is None)
    docs = {i: doc or {} for i, doc in docs.items()}   # a damaged row counts, and adds nothing else
    for row in rows:
        if row["top_symptom"] == "none":
            continue
        day = row["created_at"][:10]
        r.by_day.setdefault(day, Counter())[row["top_symptom"]] += 1
        r.by_symptom[row["top_symptom"]] += 1
    ids = [row["id"] for row in rows]
    _root_causes(r, store, ids)
    _nodes(r, store, ids)
    _versions(r, rows, docs)
    _changes(r, rows, docs, store)
    _training(r, rows, docs)
    _benchmarks(r, store, ids)
    _unclaimed(r, store, ids)
    _feedback(r, rows)
    _tune_next(r)
    if channels is None:   # (a channel's own report holds that channel's diagnoses only, and fleet rows are nobody's)
        r.fleet = fleet_view(store, rows, docs, _iso(since), _iso(until), DIAGNOSTIC)
    return r


def _in(ids: list[int]) -> str:
    return ",".join(str(int(i)) for i in ids) or "-1"


def _root_causes(r: ReportData, store: Store, ids: list[int]) -> None:
    groups: dict[tuple[str, str], dict[str, Any]] = {}
    for f in store.db.query(f"select diagnosis_id, symptom, rule, severity from findings where idx = 0 and "
                            f"diagnosis_id in ({_in(ids)})"):
        g = groups.setdefault((f["symptom"], f["rule"]), {"symptom": f["symptom"], "rule": f["rule"], "count": 0,
                                                          "score": 0, "ids": []})
        g["count"] += 1
        g["score"] += SEVERITY_WEIGHT.get(f["severity"], 1)
        g["ids"].append(f["diagnosis_id"])
    r.root_causes = sorted(groups.values(), key=lambda g: (-g["score"], -g["count"], g["rule"]))


def _nodes(r: ReportData, store: Store, ids: list[int]) -> None:
    hosts: dict[str, dict[str, Any]] = {}
    for n in store.db.query(f"select * from nodes where diagnosis_id in ({_in(ids)})"):
        if n["symptom"] in CONFIGURATION:
            continue   # a setting or an install to fix on every node: draining one would not help
        h = hosts.setdefault(n["host"], {"host": n["host"], "ids": set(), "symptoms": Counter(), "roles": set()})
        h["ids"].add(n["diagnosis_id"])
        h["symptoms"][n["symptom"]] += 1
        h["roles"].add(n["role"])
    out = []
    for h in hosts.values():
        suspicious = F.SUSPECT_ROLES & h["roles"] or HARDWARE & set(h["symptoms"])
        if len(h["ids"]) >= 2 or suspicious:
            out.append({**h, "ids": sorted(h["ids"]), "incidents": len(h["ids"]), "roles": sorted(h["roles"])})
    r.nodes = sorted(out, key=lambda h: (-h["incidents"], h["host"]))


def _versions(r: ReportData, rows: list[dict], docs: dict[int, dict]) -> None:
    seen: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for row in rows:
        doc = docs[row["id"]]
        for comp, val in (doc.get("versions") or {}).items():
            if val:
                seen[comp][val].append(row["id"])
        v = doc.get("versions") or {}
        for rule in V.RULES:
            if rule.warn and rule.holds(v):
                r.version_warnings.append({"ids": [row["id"]], "text": rule.text.format(**v)})
    r.versions = {k: dict(v) for k, v in sorted(seen.items())}


def _changes(r: ReportData, rows: list[dict], docs: dict[int, dict], store: Store) -> None:
    recs: dict[tuple[str, str, str], dict[str, Any]] = {}
    for row in rows:
        for fi, f in enumerate(docs[row["id"]].get("findings", [])):
            for si, s in enumerate(f.get("steps", [])):
                for c in s.get("changes", []):
                    if c["kind"] == "command" or c.get("to") is None or c["name"] in DIAGNOSTIC:
                        continue   # logging switches that help read the next failure are not fixes to rank
                    key = (c["kind"], c["name"], str(c["to"]))
                    rec = recs.setdefault(key, {"kind": c["kind"], "name": c["name"], "to": c["to"], "count": 0,
                                                "first_step": 0, "ids": [], "jobs": {}})
                    rec["count"] += 1
                    rec["first_step"] += fi == 0 and si == 0  # the top recommendation for the root cause
                    rec["ids"].append(row["id"])
                    rec["jobs"].setdefault(row["job_key"], row["created_at"])
    for rec in recs.values():
        applied = []
        for job, first_at in rec["jobs"].items():
            where, scope = _scope(r.channels)
            later = store.db.query(f"select id, diagnosis_json from diagnoses where job_key = ? and created_at > ?"
                                   f"{where}", [job, first_at, *scope])
            if any(_applied(rec, (load_doc(x["diagnosis_json"], x["id"]) or {}).get("job") or {}) for x in later):
                applied.append(job)
        rec["jobs_recommended"] = len(rec["jobs"])
        rec["jobs_applied"] = len(applied)
        del rec["jobs"]
    r.changes = sorted(recs.values(), key=lambda c: (-c["count"], c["name"]))


def _applied(rec: dict[str, Any], job: dict[str, Any]) -> bool:
    want = str(rec["to"]).lower()
    if rec["kind"] == "env":
        return str((job.get(J.ENV) or {}).get(rec["name"], "")).lower() == want
    key = J.key_of_change(rec["kind"], rec["name"])
    return key is not None and key in job and str(job[key]).lower() == want


def _training(r: ReportData, rows: list[dict], docs: dict[int, dict]) -> None:
    per_job: dict[str, dict[str, Any]] = {}
    for row in rows:
        st = docs[row["id"]].get("step_time") or {}
        if st:   # healthy runs too: how fast each job steps, and at what throughput, over time
            r.step_times.append({"id": row["id"], "at": row["created_at"], "job": row["job_key"],
                                 "median_s": st.get("median_s"), "p90_s": st.get("p90_s"), "steps": st.get("steps"),
                                 "anomalous_steps": st.get("anomalous_steps"),
                                 "slowdown_pct": (st.get("slowdown") or {}).get("pct"),
                                 "tflops_per_gpu": st.get("tflops_per_gpu"), "mfu_pct": st.get("mfu_pct")})
        for f in docs[row["id"]].get("findings", []):
            if f["symptom"] in TRAINING:
                j = per_job.setdefault(row["job_key"], {"job": row["job_key"], **dict.fromkeys(sorted(TRAINING), 0),
                                                        "ids": []})
                j[f["symptom"]] += 1
                j["ids"].append(row["id"])
            elif f["symptom"] in THROUGHPUT:
                measure = next(((label, f["facts"][k]) for k, label in _SLOW_MEASURE if k in f["facts"]), ("", None))
                r.throughput.append({"id": row["id"], "at": row["created_at"], "job": row["job_key"],
                                     "symptom": f["symptom"], "measure": measure[0], "value": measure[1]})
            elif f["symptom"] in ROUTING:
                r.moe.append({"id": row["id"], "at": row["created_at"], "job": row["job_key"],
                              F.MAX_DEVIATION: f["facts"].get(F.MAX_DEVIATION), F.DROP_RATE: f["facts"].get(F.DROP_RATE)})
    r.loss = sorted(per_job.values(), key=lambda j: (-sum(j[s] for s in TRAINING), j["job"]))


def _benchmarks(r: ReportData, store: Store, ids: list[int]) -> None:
    for b in store.db.query(f"select * from benchmarks where diagnosis_id in ({_in(ids)}) order by diagnosis_id"):
        # only what the parser judges: ring collectives at large messages (no ceiling for alltoall & co.)
        expected = I.busbw_ceiling(b["op"], b["instance"], b["nodes"], b["max_size_bytes"])
        r.benchmarks.append({**b, "rows": json.loads(b["rows_json"]), "expected_busbw": expected,
                             "ratio": round(b["max_size_busbw"] / expected, 2) if expected else None})


def _unclaimed(r: ReportData, store: Store, ids: list[int]) -> None:
    """The unrecognised error lines of the period, less those today's readers recognise (recorded before a parser
    learnt them)."""
    rows = list(store.db.query(
        f"select min(rowid) as uid, template, sum(count) as lines, count(distinct diagnosis_id) as diagnoses, "
        f"min(example) as example, "
        f"group_concat(distinct diagnosis_id) as ids from unclaimed where diagnosis_id in ({_in(ids)}) "
        f"group by template order by diagnoses desc, lines desc limit 30"))
    if rows:
        from bot.service import builtin_engine, recognised
        engine = builtin_engine()
        rows = [u for u in rows if recognised(engine, str(u["example"])) is None]
    r.unclaimed = rows[:15]


def _feedback(r: ReportData, rows: list[dict]) -> None:
    for row in rows:
        if row["vote"]:
            r.votes[row["vote"]] += 1
            right = r.precision.setdefault(row["top_symptom"], [0, 0])
            right[0] += row["vote"] == "up"
            right[1] += 1
        if row["correct_symptom"]:
            r.wrong.append({"id": row["id"], "said": row["top_symptom"], "right": row["correct_symptom"],
                            **({"cause": row["correct_text"]} if row.get("correct_text") else {})})


def _tune_next(r: ReportData) -> None:
    """Concrete next actions, most urgent kind first, each with the count and diagnoses behind it."""
    out = r.tune_next

    def add(priority: int, text: str, evidence: int, ids) -> None:
        out.append({"priority": priority, "text": text, "evidence": evidence, "ids": sorted(set(ids))})

    for n in r.nodes:
        if n["incidents"] >= 2 or F.ROLE_LAGGING in n["roles"] or HARDWARE & set(n["symptoms"]):
            add(0, f"Drain and health-check {n['host']}: in {n['incidents']} incident(s) "
                   f"({', '.join(sorted(n['symptoms']))})", n["incidents"], n["ids"])
    for w in r.version_warnings:
        add(1, w["text"], len(w["ids"]), w["ids"])
    for b in r.benchmarks:
        if b["ratio"] is not None and b["ratio"] < I.BUSBW_OK:
            add(1, f"{b['op']} on {b['nodes']}x {b['instance']} reaches {b['max_size_busbw']:.0f} GB/s bus bandwidth, "
                   f"{b['ratio']:.0%} of the ~{b['expected_busbw']:.0f} GB/s expected: check EFA/TCP fallback",
                1, [b["diagnosis_id"]])
    for rc in r.root_causes[:3]:
        if rc["count"] >= 2:
            add(2, f"Recurring root cause {rc['symptom']} ({rc['rule']}): {rc['count']} incidents, score "
                   f"{rc['score']}", rc["count"], rc["ids"])
    for c in r.changes:
        if c["first_step"] >= 2 and c["jobs_applied"] < c["jobs_recommended"]:
            add(3, f"Apply {c['name']} = {c['to']}: the first fix for {c['first_step']} root cause(s), applied in "
                   f"{c['jobs_applied']} of {c['jobs_recommended']} job(s)", c["first_step"], c["ids"])
    for comp in ("nccl", "aws_ofi_nccl", "libfabric", "torch", "driver"):
        vals = r.versions.get(comp, {})
        if len(vals) > 1:
            ids = [i for v in vals.values() for i in v]
            add(4, f"Pin {comp}: {len(vals)} versions seen ({', '.join(sorted(vals, key=V.parse))})", len(set(ids)), ids)
    for u in r.unclaimed[:3]:
        if u["diagnoses"] >= 2:
            add(5, f"Write a playbook for the unrecognised error '{shorten(u['template'], 80)}' "
                   f"(`triage rules new --from-unclaimed {u['uid']}`)", u["diagnoses"],
                [int(x) for x in str(u["ids"]).split(",")])
    out.sort(key=lambda x: (x["priority"], -x["evidence"]))
