"""`triage notify`: diagnose one job's logs and post the answer to a Slack channel before anyone asks — the same
blocks and feedback buttons as /diagnose, one thread per job, stored like every diagnosis. The Slurm epilog in
`examples/slurm/` and `triage watch` (bot/proactive/watch.py) call it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from core.redact import mask_secrets

HEAD = {"en": "Job {job} finished{code}: {verdict} ({files})", "ko": "작업 {job} 종료{code}: {verdict} ({files})"}
CODE = {"en": " with exit code {n}", "ko": " (종료 코드 {n})"}
FILES = {"en": "{n} log file(s)", "ko": "로그 파일 {n}개"}
NOTHING = {"en": "no known failure in its logs", "ko": "로그에서 알려진 장애를 찾지 못함"}
# an exit status above 128 is 128 + the signal that ended the process
SIGNALS = {
    "en": {9: "SIGKILL: the kernel's OOM killer, or a cancel or time limit that escalated",
           15: "SIGTERM: cancelled, preempted or out of time", 6: "SIGABRT: aborted, e.g. by the NCCL watchdog",
           11: "SIGSEGV: a segmentation fault", 7: "SIGBUS: a bus error, often /dev/shm too small"},
    "ko": {9: "SIGKILL: 커널 OOM killer이거나, 취소·시간 제한이 강제 종료로 이어짐",
           15: "SIGTERM: 취소, 선점 또는 시간 초과", 6: "SIGABRT: 중단됨(예: NCCL watchdog)",
           11: "SIGSEGV: 세그멘테이션 오류", 7: "SIGBUS: 버스 오류(대개 /dev/shm 부족)"},
}
FAILED_UNKNOWN = {
    "en": ":x: The job failed{code} but its logs hold no failure Train Triage knows: read the last lines of every "
          "rank's log (and the node's kernel log for a kill).",
    "ko": ":x: 작업은 실패했지만{code} 로그에서 Train Triage가 아는 장애를 찾지 못했습니다. 모든 rank 로그의 마지막 줄(강제 종료라면 노드의 커널 로그)을 읽어 보세요.",
}


def exit_text(n: int, lang: str = "en") -> str:
    """' with exit code 137 (SIGKILL: …)' — the signal named where the status says one ended the job."""
    lang = lang if lang in CODE else "en"
    why = SIGNALS[lang].get(n - 128) if 128 < n < 160 else None
    return CODE[lang].format(n=n) + (f" ({why})" if why else "")


@dataclass
class Outcome:
    status: str            # posted | queued | skipped
    diagnosis_id: int | None = None
    ts: str | None = None
    why: str = ""


class Notifier:
    """Posts job diagnoses to one channel through a SlackBot's answer path (outbox, attachments, LLM phrasing)."""

    def __init__(self, settings, store, channel: str, lang: str = "en"):
        from bot.slack.app import SlackBot
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
        from bot.store.store import job_key_for
        key = mask_secrets(job_key_for(d, job))
        thread = self.store.job_thread(key, self.channel)
        did = self.triage.record(d, None, source="notify", channel=self.channel, job_key=key)
        from bot.slack import blocks as kit
        head = self.head(key, exit_code, len(paths), d)

        def decorate(blocks, text):   # the header, on the deterministic answer and on its phrasing alike
            if not d.findings and exit_code:   # never a green tick on a job that exited non-zero
                lang = self.lang if self.lang in FAILED_UNKNOWN else "en"
                blocks = [kit.section(kit.esc(FAILED_UNKNOWN[lang].format(code=exit_text(exit_code, lang))))] \
                    + blocks[1:]
            return [kit.context(kit.esc(head))] + blocks, f"{kit.esc(head)}. {text}"
        ts = self.bot.post_diagnosis(self.client, self.channel, thread, d, did, self.lang, decorate=decorate)
        return Outcome("posted" if ts else "queued", did, ts)

    def head(self, key: str, exit_code: int | None, files: int, d) -> str:
        lang = self.lang if self.lang in HEAD else "en"
        from bot.answer.i18n import symptom_name
        verdict = symptom_name(lang, d.findings[0].symptom) if d.findings else NOTHING[lang]
        code = exit_text(exit_code, lang) if exit_code is not None else ""
        return mask_secrets(HEAD[lang].format(job=key, code=code, verdict=verdict, files=FILES[lang].format(n=files)))


def slack_ready(settings) -> str | None:
    """Why notify/watch cannot post, or None."""
    if settings.slack_bot_token is None:
        return "SLACK_BOT_TOKEN: not set (the bot token, xoxb-…, that posts the answers)"
    return None


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
