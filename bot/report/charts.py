"""The report's charts as PNG files (matplotlib, Agg backend: no display needed)."""
from __future__ import annotations

from pathlib import Path

from bot.report.data import ReportData

SIZE = (10, 5)   # inches; at DPI this is 1000 x 500 pixels
DPI = 100


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def symptom_colour(symptom: str):
    """One colour per symptom, the same in every report: its place in the registry picks from 40 distinct colours
    (tab20, then tab20b), so no two of the built-in symptoms share one."""
    import matplotlib
    from core import symptoms as S
    ids = S.ids()
    i = ids.index(symptom) if symptom in ids else len(ids) + sum(map(ord, symptom))
    return matplotlib.colormaps["tab20" if i % 40 < 20 else "tab20b"](i % 20)


def incidents_by_day(r: ReportData, path: Path) -> Path | None:
    if not r.by_day:
        return None
    plt = _plt()
    from datetime import timedelta
    day, end, days = r.since.date(), r.until.date(), []
    while day <= end and len(days) < 400:  # every day of the period, quiet days included
        days.append(day.isoformat())
        day += timedelta(days=1)
    symptoms = sorted({s for c in r.by_day.values() for s in c})
    fig, ax = plt.subplots(figsize=SIZE, dpi=DPI)
    bottom = [0] * len(days)
    for s in symptoms:
        vals = [r.by_day.get(d, {}).get(s, 0) for d in days]
        ax.bar(days, vals, bottom=bottom, label=s, color=symptom_colour(s))
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_title("Incidents by root cause per day")
    ax.set_ylabel("diagnoses")
    ax.legend(fontsize=8, loc="upper left")
    ax.tick_params(axis="x", labelrotation=45, labelsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def root_causes(r: ReportData, path: Path) -> Path | None:
    if not r.root_causes:
        return None
    plt = _plt()
    top = r.root_causes[:10][::-1]
    fig, ax = plt.subplots(figsize=SIZE, dpi=DPI)
    ax.barh([f"{g['rule']}" for g in top], [g["score"] for g in top], color="#c0392b")
    ax.set_title("What to fix first: severity x frequency")
    ax.set_xlabel("score (critical 3, error 2, warning 1 per incident)")
    ax.tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def nccl_tests(r: ReportData, path: Path) -> Path | None:
    if not r.benchmarks:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=SIZE, dpi=DPI)
    for b in r.benchmarks:
        rows = sorted(b["rows"], key=lambda x: x["size_bytes"])
        ax.plot([x["size_bytes"] for x in rows], [x["busbw"] for x in rows], marker=".",
                label=f"#{b['diagnosis_id']} {b['op']} {b['nodes'] or '?'}x{b['instance'] or '?'}")
        if b["expected_busbw"]:
            ax.axhline(b["expected_busbw"], linestyle="--", linewidth=0.8, color="grey")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_title("nccl-tests bus bandwidth (dashed: what the instance should reach)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def step_times(r: ReportData, path: Path) -> Path | None:
    """Median step time per job over the period (one line per job, a marker per diagnosis)."""
    timed = [s for s in r.step_times if s.get("median_s") is not None]
    if not timed:
        return None
    plt = _plt()
    from datetime import datetime
    fig, ax = plt.subplots(figsize=SIZE, dpi=DPI)
    jobs: dict[str, list[dict]] = {}
    for s in sorted(timed, key=lambda s: s["at"]):
        jobs.setdefault(s["job"], []).append(s)
    for job, points in sorted(jobs.items())[:12]:
        ax.plot([datetime.fromisoformat(p["at"]) for p in points], [p["median_s"] for p in points], marker="o",
                label=job)
    ax.set_title("Median step time per job")
    ax.set_ylabel("seconds per step")
    ax.legend(fontsize=8)
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def draw_all(r: ReportData, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    made = [incidents_by_day(r, out / "incidents_by_day.png"), root_causes(r, out / "root_causes.png"),
            nccl_tests(r, out / "nccl_tests.png"), step_times(r, out / "step_times.png")]
    return [p for p in made if p is not None]
