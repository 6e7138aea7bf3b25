"""report.md: one section per topic, only when there is data, every figure with the diagnosis ids behind it."""
from __future__ import annotations

from pathlib import Path

from bot.report.data import ReportData
from bot.report.fleet import fleet_lines
from core import facts as F
from core import versions as V
from core.templates import shorten

_DRIFTS = ("nccl", "aws_ofi_nccl", "libfabric", "torch", "driver")   # components whose versions must agree


def _ids(ids, limit: int = 8) -> str:
    ids = sorted(set(int(i) for i in ids))
    shown = ", ".join(f"#{i}" for i in ids[:limit])
    return shown + (f" and {len(ids) - limit} more" if len(ids) > limit else "")


def _delta(now: int, before: int) -> str:
    if before == 0:
        return "new" if now else "–"
    pct = (now - before) / before
    return f"{pct:+.0%}"


def render(r: ReportData, charts: list[Path]) -> str:
    names = {p.name for p in charts}
    span = f"{r.since:%Y-%m-%d %H:%M} – {r.until:%Y-%m-%d %H:%M} UTC"
    out = ["# Train Triage weekly tuning report", "", f"Period: {span}. Diagnoses: {r.total} "
           f"(previous period: {r.previous_total}, {_delta(r.total, r.previous_total)}).", ""]
    out += _notes(r)
    if r.tune_next:
        out += ["## Tune this next", ""]
        out += [f"{i}. {t['text']} — evidence: {t['evidence']} ({_ids(t['ids'])})" for i, t in enumerate(r.tune_next[:10], 1)]
        out.append("")
    if r.by_symptom:
        out += ["## Incidents by symptom", "", "| symptom | this period | previous | change |", "|---|---:|---:|---:|"]
        for s in sorted(set(r.by_symptom) | set(r.previous_by_symptom), key=lambda s: -r.by_symptom.get(s, 0)):
            out.append(f"| {s} | {r.by_symptom.get(s, 0)} | {r.previous_by_symptom.get(s, 0)} | "
                       f"{_delta(r.by_symptom.get(s, 0), r.previous_by_symptom.get(s, 0))} |")
        if "incidents_by_day.png" in names:
            out += ["", "![Incidents by day](incidents_by_day.png)"]
        out.append("")
    if r.root_causes:
        out += ["## Recurring root causes (severity × frequency)", "", "| rule | incidents | score | diagnoses |",
                "|---|---:|---:|---|"]
        out += [f"| {g['rule']} | {g['count']} | {g['score']} | {_ids(g['ids'])} |" for g in r.root_causes[:10]]
        if "root_causes.png" in names:
            out += ["", "![Root causes](root_causes.png)"]
        out.append("")
    if r.nodes:
        out += ["## Nodes that keep showing up (drain candidates)", "", "| host | incidents | symptoms | roles | diagnoses |",
                "|---|---:|---|---|---|"]
        out += [f"| {n['host']} | {n['incidents']} | {', '.join(f'{k} ×{v}' for k, v in n['symptoms'].items())} | "
                f"{', '.join(n['roles'])} | {_ids(n['ids'])} |" for n in r.nodes[:15]]
        out.append("")
    if r.versions:
        out += ["## Versions seen", ""]
        for comp, vals in r.versions.items():
            drift = " **drift**" if len({V.parse(v) for v in vals}) > 1 and comp in _DRIFTS else ""   # 1.18 = 1.18.0
            out.append(f"- {comp}{drift}: " + "; ".join(f"{v} ({_ids(ids, 4)})" for v, ids in sorted(vals.items())))
        out += [f"- ⚠ {w['text']} ({_ids(w['ids'])})" for w in r.version_warnings]
        out.append("")
    if r.changes:
        out += ["## Changes recommended most often", "", "| change | times | jobs | applied later in | diagnoses |",
                "|---|---:|---:|---:|---|"]
        out += [f"| `{c['name']}` → `{c['to']}` ({c['kind']}) | {c['count']} | {c['jobs_recommended']} | "
                f"{c['jobs_applied']} | {_ids(c['ids'], 4)} |" for c in r.changes[:12]]
        out.append("")
    out += fleet_lines(r.fleet) + _training(r, names)
    if r.benchmarks:
        out += ["## nccl-tests bus bandwidth", "", "| diagnosis | test | nodes × instance | busbw at largest size | "
                "expected | ratio |", "|---|---|---|---:|---:|---:|"]
        for b in r.benchmarks:
            exp = f"{b['expected_busbw']:.0f} GB/s" if b["expected_busbw"] else "–"
            ratio = f"{b['ratio']:.0%}" if b["ratio"] is not None else "–"
            out.append(f"| #{b['diagnosis_id']} | {b['op']} | {b['nodes'] or '?'} × {b['instance'] or '?'} | "
                       f"{b['max_size_busbw']:.1f} GB/s ({b['max_size_bytes'] >> 20} MiB) | {exp} | {ratio} |")
        if any(b["expected_busbw"] is None for b in r.benchmarks):
            out += ["", "–: nothing to compare with. The expected figures are for all_reduce, reduce_scatter and "
                        "all_gather at 64 MiB and more on a known instance; there is none for alltoall, broadcast or "
                        "sendrecv."]
        if "nccl_tests.png" in names:
            out += ["", "![nccl-tests](nccl_tests.png)"]
        out.append("")
    if r.unclaimed:
        out += ["## Unrecognised errors (candidates for new playbooks)", "",
                "`triage rules new --from-unclaimed ID --dir <playbook dir>` writes a rule for one.", "",
                "| ID | template | lines | diagnoses | example |", "|---:|---|---:|---:|---|"]
        out += [f"| {u['uid']} | `{shorten(u['template'], 120)}` | {u['lines']} | {u['diagnoses']} | "
                f"{shorten(str(u['example']), 100)} |" for u in r.unclaimed]
        out.append("")
    if r.votes or r.wrong:
        out += ["## Helpfulness", "", f"👍 {r.votes.get('up', 0)} · 👎 {r.votes.get('down', 0)}", ""]
        out += _precision(r)
        out += [f"- #{w['id']}: said `{w['said']}`, users say `{w['right']}`"
                + (f" — “{shorten(w['cause'], 200)}”" if w.get("cause") else "") for w in r.wrong]
        if r.wrong:
            out += ["", "`triage corpus export --feedback --since 7d > feedback.jsonl` turns these into eval cases."]
        out.append("")
    if not r.total:
        out += ["No diagnoses were recorded in this period.", ""]
    return "\n".join(out)


def _precision(r: ReportData) -> list[str]:
    """This period's precision as users rated it: the share of rated answers marked helpful, per symptom said."""
    up, rated = (sum(v[i] for v in r.precision.values()) for i in (0, 1))
    if not rated:
        return []
    out = [f"Precision from votes: {100 * up / rated:.0f}% ({up} of {rated} rated answers marked helpful).", "",
           "| symptom said | helpful | rated | precision |", "|---|---:|---:|---:|"]
    out += [f"| {s} | {u} | {n} | {100 * u / n:.0f}% |" for s, (u, n) in sorted(r.precision.items(),
                                                                                   key=lambda kv: -kv[1][1])]
    return out + [""]


def _training(r: ReportData, names: set[str] = frozenset()) -> list[str]:
    """Training stability (loss, MoE routing) and throughput sections."""
    out: list[str] = []
    if r.loss or r.moe:
        out += ["## Training stability", ""]
        if r.loss:
            out += ["| job | loss spikes | NaN/overflow | diagnoses |", "|---|---:|---:|---|"]
            out += [f"| {j['job']} | {j['loss_spike']} | {j['loss_nan']} | {_ids(j['ids'])} |" for j in r.loss[:10]]
        if r.moe:
            out += ["", "MoE imbalance over time:", ""]
            out += [f"- {m['at'][:16]} {m['job']}: max expert deviation {m[F.MAX_DEVIATION]}, drop rate "
                    f"{m[F.DROP_RATE]} (#{m['id']})" for m in r.moe[:10]]
        out.append("")
    if r.throughput:
        out += ["## Throughput", "", "| when | job | symptom | measure | diagnosis |", "|---|---|---|---:|---|"]
        out += [f"| {t['at'][:16]} | {t['job']} | {t['symptom']} | {t['measure']} {'' if t['value'] is None else t['value']} | #{t['id']} |"
                for t in sorted(r.throughput, key=lambda t: (t["job"], t["at"]))[:20]]
        out.append("")
    if r.step_times:
        out += ["## Step time and MFU per job", "",
                "Every diagnosed log that printed step times or throughput, healthy runs included (MFU against the "
                "GPU's dense BF16 peak, when the log names the GPU or the instance).", "",
                "| when | job | median | p90 | steps | unusually slow steps | lasting slowdown | TFLOP/s per GPU | MFU "
                "| diagnosis |", "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
        out += [f"| {s['at'][:16]} | {s['job']} | {_v(s['median_s'], ' s')} | {_v(s['p90_s'], ' s')} | "
                f"{_v(s['steps'])} | {_v(s['anomalous_steps'])} | "
                f"{'+%g%%' % s['slowdown_pct'] if s['slowdown_pct'] else '-'} | {_v(s['tflops_per_gpu'])} | "
                f"{_v(s['mfu_pct'], '%')} | #{s['id']} |"
                for s in sorted(r.step_times, key=lambda s: (s["job"], s["at"]))[:30]]
        if "step_times.png" in names:
            out += ["", "![Step time per job](step_times.png)"]
        out.append("")
    return out


def _notes(r: ReportData) -> list[str]:
    """What the reader must know before the figures: the channels they cover, rows left out."""
    out = []
    if r.channels is not None:
        out += [f"Scope: diagnoses made in {', '.join(r.channels) or 'no channel'} only.", ""]
    if r.unreadable:
        out += [f"Note: {len(r.unreadable)} stored diagnosis(es) could not be read and are left out of the sections "
                f"below ({_ids(r.unreadable)}).", ""]
    return out


def summary(r: ReportData) -> str:
    """The short Slack message that goes with the files (mrkdwn: what came from a log is escaped)."""
    from bot.slack.blocks import esc
    top = esc(", ".join(f"{s} {n}" for s, n in r.by_symptom.most_common(3)) or "none")
    scope = " in this channel" if r.channels is not None else ""
    lines = [f":bar_chart: *Weekly tuning report* — {r.total} diagnoses{scope} ({_delta(r.total, r.previous_total)} vs the "
             f"previous period). Top: {top}."]
    lines += [f"• {esc(t['text'])} ({esc(str(t['evidence']))})" for t in r.tune_next[:3]]
    return "\n".join(lines)


def _v(x, unit: str = "") -> str:
    return "-" if x is None else f"{x:g}{unit}"
