"""The weekly tuning report: data from the store → report.md + PNG charts → optionally Slack."""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from bot.report import charts, markdown
from bot.report.data import ReportData, build
from bot.store.store import Store


@dataclass
class Report:
    data: ReportData
    markdown_path: Path
    charts: list[Path]

    @property
    def summary(self) -> str:
        return markdown.summary(self.data)


def make(store: Store, since: datetime, until: datetime, out: Path,
         channels: tuple[str, ...] | None = None) -> Report:
    data = build(store, since, until, channels)
    out.mkdir(parents=True, exist_ok=True)
    pngs = charts.draw_all(data, out)
    md = out / "report.md"
    md.write_text(markdown.render(data, pngs), encoding="utf-8")
    return Report(data, md, pngs)


def last_week(store: Store, channels: tuple[str, ...] | None = None) -> Report:
    """The report for the 7 days up to now (only `channels`' diagnoses when given), written to a fresh temporary
    directory (for posting)."""
    import tempfile
    from datetime import timedelta, timezone
    now = datetime.now(timezone.utc)
    return make(store, now - timedelta(days=7), now, Path(tempfile.mkdtemp(prefix="triage-report-")), channels)


def post(client, channel: str, report: Report, thread_ts: str | None = None) -> None:
    """A summary message plus report.md and the charts as files (one files_upload_v2 call)."""
    resp = client.chat_postMessage(channel=channel, text=report.summary, thread_ts=thread_ts)
    uploads = [{"file": str(p), "filename": p.name, "title": p.stem.replace("_", " ")}
               for p in [report.markdown_path, *report.charts]]
    client.files_upload_v2(channel=channel, file_uploads=uploads, thread_ts=thread_ts or resp.get("ts"),
                           initial_comment="Report and charts")
