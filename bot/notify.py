"""`triage notify`: diagnose one job's logs and post the answer to a Slack channel before anyone asks — the same
blocks and feedback buttons as /diagnose, one thread per job, stored like every diagnosis. The Slurm epilog in
`examples/slurm/` and `triage watch` (bot/watch.py) call it."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from core.redact import mask_secrets

HEAD = {"en": "Job {job} finished{code}: {verdict} ({files})", "ko": "작업 {job} 종료{code}: {verdict} ({files})"}
CODE = {"en": " with exit code {n}", "ko": " (종료 코드 {n})"}
FILES = {"en": "{n} log file(s)", "ko": "로그 파일 {n}개"}
NOTHING = {"en": "no known failure in its logs", "ko": "로그에서 알려진 장애를 찾지 못함"}


@dataclass
class Outcome:
    status: str            # posted | queued | skipped
    diagnosis_id: int | None = None
    ts: str | None = None
    why: str = ""


class Notifier:
    """Posts job diagnoses to one channel through a SlackBot's answer path (outbox, attachments, LLM phrasing)."""

    def __init__(self, settings, store, channel: str, lang: str = "en"):
        from bot.slack_app import SlackBot
        from bot.wiring import slack_client, triage
        self.client = slack_client(settings)
        self.triage = triage(settings, store)
        self.bot = SlackBot(settings, self.triage, settings.slack_bot_token.get_secret_value())
        self.store, self.channel, self.lang = store, channel, lang

    def diagnose(self, paths: list[tuple[str, str]], label: str):
        """One diagnosis of all the job's files read together. Raises UnusableInput when none can be read."""
        from core.inputs import Joined, open_inputs
        joined = Joined(label, [lambda p=p, n=n: open_inputs(p, self.triage.max_bytes, n) for p, n in paths])
        return self.triage.engine.diagnose(joined, self.lang)

    def job(self, paths: list[tuple[str, str]], job: str = "", exit_code: int | None = None,
            only_failures: bool = False, diagnosis=None) -> Outcome:
        from core.inputs import Joined
        d = diagnosis or self.diagnose(paths, Joined.title([n for _, n in paths]))
        if not d.findings and (exit_code == 0 or (exit_code is None and only_failures)):
            return Outcome("skipped", why="no finding" + (" and exit code 0" if exit_code == 0 else ""))
        from bot.store import job_key_for
        key = mask_secrets(job_key_for(d, job))
        thread = self.store.job_thread(key, self.channel)
        did = self.triage.record(d, None, source="notify", channel=self.channel, job_key=key)
        from bot import slack_blocks as kit
        blocks, text, cut = self.bot.answer(d, did, self.lang)
        head = self.head(key, exit_code, len(paths), d)
        ts = self.bot.post_diagnosis(self.client, self.channel, thread, d, did, self.lang,
                                     ([kit.context(kit.esc(head))] + blocks, f"{kit.esc(head)}. {text}", cut))
        return Outcome("posted" if ts else "queued", did, ts)

    def head(self, key: str, exit_code: int | None, files: int, d) -> str:
        lang = self.lang if self.lang in HEAD else "en"
        from bot.i18n import symptom_name
        verdict = symptom_name(lang, d.findings[0].symptom) if d.findings else NOTHING[lang]
        code = CODE[lang].format(n=exit_code) if exit_code is not None else ""
        return mask_secrets(HEAD[lang].format(job=key, code=code, verdict=verdict, files=FILES[lang].format(n=files)))


def slack_ready(settings) -> str | None:
    """Why notify/watch cannot post, or None."""
    if settings.slack_bot_token is None:
        return "SLACK_BOT_TOKEN: not set (the bot token, xoxb-…, that posts the answers)"
    return None


def cmd_notify(args, settings) -> int:
    from bot.wiring import store
    from core.ingest import UnusableInput
    from core.inputs import log_paths
    why = slack_ready(settings)
    if why:
        print(f"triage: {why}", file=sys.stderr)
        return 2
    paths, notes = log_paths(args.files)
    for note in notes:
        print(f"triage: {note}", file=sys.stderr)
    notifier = Notifier(settings, store(settings), args.channel, args.lang)
    try:
        out = notifier.job(paths, args.notify_job or "", args.exit_code, args.only_failures)
    except UnusableInput as e:
        print(f"triage: {e}", file=sys.stderr)
        return 2
    except Exception as e:   # Slack refused for good (not_in_channel, invalid_auth): one line, not a traceback
        print(f"triage: could not post to {args.channel}: {slack_error(e)}", file=sys.stderr)
        return 1
    print(said(out, args.channel))
    return 0


def slack_error(e: Exception) -> str:
    resp: Any = getattr(e, "response", None)
    return str(resp.get("error")) if resp is not None and hasattr(resp, "get") else type(e).__name__


def said(out: Outcome, channel: str) -> str:
    if out.status == "skipped":
        return f"triage: nothing posted ({out.why})"
    if out.status == "queued":
        return (f"triage: Slack is unavailable; diagnosis #{out.diagnosis_id} waits in the outbox (`triage serve` "
                "on this TRIAGE_DB posts it)")
    return f"triage: posted diagnosis #{out.diagnosis_id} to {channel} (ts {out.ts})"


def add_parser(sub) -> None:
    n = sub.add_parser("notify", help="diagnose one job's logs and post the answer to a Slack channel")
    n.add_argument("files", nargs="+", help="the job's log files or directories (read together as one job)")
    n.add_argument("--channel", required=True, help="Slack channel id (C…) to post to")
    n.add_argument("--job", dest="notify_job", metavar="ID", help="job id (default: the Slurm job id in the logs or file names)")
    n.add_argument("--exit-code", type=int, help="the job's exit code (0 with no finding posts nothing)")
    n.add_argument("--only-failures", action="store_true", help="post only when something was found")
    n.add_argument("--lang", choices=("en", "ko"), default="en")
    n.set_defaults(func=cmd_notify)
