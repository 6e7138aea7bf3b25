"""The weekly report's fleet view, when `triage fleet --record` stored jobs in the period: per SOURCE (a cluster's
log directory or S3 prefix) the jobs read, the failures by symptom, the nodes behind most hardware findings and the
changes recommended most often."""
from __future__ import annotations

from collections import Counter
from typing import Any

from core import symptoms as S

HARDWARE = S.in_group(S.HARDWARE)


def fleet_view(store, rows: list[dict], docs: dict[int, dict], since: str, until: str,
               skip: frozenset[str] = frozenset()) -> list[dict[str, Any]]:
    """One entry per SOURCE with fleet jobs recorded between `since` and `until` (ISO), most jobs first. `rows` and
    `docs` are the period's diagnoses and their JSON; changes named in `skip` (logging switches) are not ranked."""
    if "fleet" not in store.db.table_names():
        return []
    jobs = list(store.db.query("select source, status, diagnosis_id from fleet where at >= ? and at <= ?",
                               [since, until]))
    by_id = {row["id"]: row for row in rows}
    out: dict[str, dict[str, Any]] = {}
    for j in jobs:
        v = out.setdefault(j["source"], {"source": j["source"], "jobs": 0, "status": Counter(), "symptoms": Counter(),
                                         "nodes": Counter(), "changes": Counter(), "ids": []})
        v["jobs"] += 1
        v["status"][j["status"]] += 1
        row = by_id.get(j["diagnosis_id"])
        if row is None:
            continue
        v["ids"].append(row["id"])
        if row["top_symptom"] != "none":
            v["symptoms"][row["top_symptom"]] += 1
        for f in docs.get(row["id"], {}).get("findings", []):
            for s in f.get("steps", []):
                v["changes"].update((c["name"], str(c["to"])) for c in s.get("changes", [])
                                    if c["kind"] != "command" and c.get("to") is not None and c["name"] not in skip)
    for v in out.values():
        ids = ",".join(str(int(i)) for i in v["ids"]) or "-1"
        for n in store.db.query(f"select host, symptom from nodes where diagnosis_id in ({ids})"):
            if n["symptom"] in HARDWARE:
                v["nodes"][n["host"]] += 1
    return sorted(out.values(), key=lambda v: (-v["jobs"], v["source"]))


def fleet_lines(view: list[dict[str, Any]]) -> list[str]:
    """The report.md section (nothing when no fleet job was recorded in the period)."""
    if not view:
        return []
    out = ["## Fleet (triage fleet)", "", "| source | jobs | with findings | healthy | failed | unreadable | "
           "failures by symptom |", "|---|---:|---:|---:|---:|---:|---|"]
    for v in view:
        st = v["status"]
        top = ", ".join(f"{s} ×{n}" for s, n in v["symptoms"].most_common(6)) or "–"
        out.append(f"| {v['source']} | {v['jobs']} | {st['diagnosed']} | {st['clean']} | {st['failed']} | "
                   f"{st['unreadable']} | {top} |")
    for v in view:
        if not (v["nodes"] or v["changes"]):
            continue
        out += ["", f"{v['source']}:"]
        if v["nodes"]:
            out.append("- Nodes behind most hardware findings: "
                       + ", ".join(f"{h} ×{n}" for h, n in v["nodes"].most_common(5)))
        if v["changes"]:
            out.append("- Top changes: " + ", ".join(f"`{k}` → `{to}` ×{n}" for (k, to), n in
                                                     v["changes"].most_common(5)))
    return out + [""]
