"""Block Kit builders: pure functions from a Diagnosis to Slack blocks, within Slack's limits
(50 blocks per message, 3000 characters per section text, 150 per header)."""
from __future__ import annotations

from typing import Any

from bot.answer.i18n import finding_title, symptom_name, t
from bot.answer.render import change_lines, step_time_line, verdict_lines
from core import symptoms
from core.models import Diagnosis, Finding

MAX_BLOCKS = 50
MAX_SECTION = 3000
MAX_HEADER = 150
MAX_STEPS_SHOWN = 6
MAX_EVIDENCE_SHOWN = 4
EMOJI = {"critical": ":rotating_light:", "error": ":x:", "warning": ":warning:"}


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def esc(text: str) -> str:
    """Text from a user or a log, made inert for Slack: no live <!channel>, <@U…> or disguised <url|label> links."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _safe(text: str, limit: int) -> str:
    """Clipped, then escaped (an entity is never cut in half)."""
    return esc(clip(text, limit))


def _code(text: str) -> str:
    return "```" + text.replace("```", "ʼʼʼ") + "```"


def section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": clip(text, MAX_SECTION)}}


def context(text: str) -> dict[str, Any]:
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": clip(text, MAX_SECTION)}]}


def cite_text(cites: list[str], runbook_url: str | None) -> str:
    if not runbook_url:
        return ", ".join(f"`{c}`" for c in cites)
    base = runbook_url.rstrip("/")
    out = []
    for c in cites:
        page, _, anchor = c.partition("#")
        out.append(f"<{base}/{page}.md{'#' + anchor if anchor else ''}|{c}>")
    return ", ".join(out)


def _finding_blocks(f: Finding, runbook_url: str | None, steps_shown: int, lang: str = "en",
                    phrased: dict[str, str] | None = None) -> tuple[list[dict], bool]:
    cut = False
    blocks: list[dict] = [section(f"*{_safe(finding_title(lang, f), 1000)}*")]
    meta = f"{t(lang, 'severity')} *{t(lang, f.severity)}* · {t(lang, 'confidence')} {f.confidence:.0%} · rule `{f.rule}`"
    if f.caused_by:
        meta += f" · consequence of `{f.caused_by}`"
    blocks.append(context(meta))
    if f.evidence:
        ev = "\n".join(f"{e.source or t(lang, 'line_n').format(n=e.line)}: {clip(e.text, 300)}"
                       for e in f.evidence[:MAX_EVIDENCE_SHOWN])
        cut |= len(f.evidence) > MAX_EVIDENCE_SHOWN
        blocks.append(section(f"*{t(lang, 'evidence').capitalize()}*\n" + _code(_safe(ev, 2000))))
    for i, s in enumerate(f.steps[:steps_shown], 1):
        cites = f"\n_{t(lang, 'runbook')}: {cite_text(s.cite, runbook_url)}_"
        text = (phrased or {}).get(f"1.{s.id}", s.text)
        changes = "\n" + _code(_safe("\n".join(change_lines(s.changes, lang)), 1200)) if s.changes else ""
        head = f"*{i}. [{t(lang, s.owner)}]* "
        room = MAX_SECTION - len(head) - len(changes) - len(cites)
        cut |= len(text) > room or len(changes) > 1500
        blocks.append(section(head + _safe(text, room // 2) + changes + cites))
    if len(f.steps) > steps_shown:
        cut = True
        more = len(f.steps) - steps_shown
        blocks.append(context(f"+{more} more step{'s' if more > 1 else ''} in the full diagnosis attached below"))
    return blocks, cut


def symptom_choices() -> tuple[str, ...]:
    """What a 👎 can pick: every known symptom, the teams' too (Slack allows 100 options), and none."""
    return (*symptoms.ids()[:99], "none")


def feedback_blocks(diagnosis_id: int) -> list[dict[str, Any]]:
    options = [{"text": {"type": "plain_text", "text": s}, "value": f"{diagnosis_id}:{s}"} for s in symptom_choices()]
    return [{"type": "actions", "block_id": f"feedback:{diagnosis_id}", "elements": [
        {"type": "button", "action_id": "triage_vote_up", "text": {"type": "plain_text", "text": ":+1: Helpful"},
         "value": str(diagnosis_id)},
        {"type": "button", "action_id": "triage_vote_down", "text": {"type": "plain_text", "text": ":-1: Not helpful"},
         "value": str(diagnosis_id)},
        {"type": "static_select", "action_id": "triage_wrong",
         "placeholder": {"type": "plain_text", "text": "Wrong? Pick the right symptom"}, "options": options},
        {"type": "button", "action_id": "triage_cause", "text": {"type": "plain_text", "text": "Tell us the cause"},
         "value": str(diagnosis_id)},
    ]}]


def cause_modal(diagnosis_id: int) -> dict[str, Any]:
    """The 👎 modal: the right symptom (required: it labels the corpus case) and the root cause in words."""
    options = [{"text": {"type": "plain_text", "text": s}, "value": s} for s in symptom_choices()]
    return {"type": "modal", "callback_id": "triage_cause", "private_metadata": str(diagnosis_id),
            "title": {"type": "plain_text", "text": "What was it really?"},
            "submit": {"type": "plain_text", "text": "Send"}, "close": {"type": "plain_text", "text": "Cancel"},
            "blocks": [
                {"type": "input", "block_id": "symptom", "label": {"type": "plain_text", "text": "Right symptom"},
                 "element": {"type": "static_select", "action_id": "pick", "options": options}},
                {"type": "input", "block_id": "cause", "optional": True,
                 "label": {"type": "plain_text", "text": "The root cause, in your words"},
                 "element": {"type": "plain_text_input", "action_id": "text", "multiline": True, "max_length": 1000}},
            ]}


def vote_blocks(vote: str, user: str, symptom: str | None) -> list[dict[str, Any]]:
    if symptom:
        text = f":memo: <@{user}> says the right diagnosis is `{symptom}`. Thanks, it is recorded."
    else:
        text = f"{':+1:' if vote == 'up' else ':-1:'} <@{user}> marked this {'helpful' if vote == 'up' else 'not helpful'}."
    return [context(text)]


def diagnosis_blocks(d: Diagnosis, diagnosis_id: int | None = None, runbook_url: str | None = None,
                     vote: list[dict] | None = None, lang: str = "en", phrasing=None) -> tuple[list[dict[str, Any]], bool]:
    """Blocks for one diagnosis, and whether anything was left out (then attach the full text). With an accepted
    LLM phrasing its summary and step prose are shown; changes and citations always come from the diagnosis."""
    name = d.input.name
    phrased = None
    if not d.findings:
        head, *unknown = verdict_lines(d, lang)
        emoji = ":grey_question:" if unknown or d.input.truncated else ":white_check_mark:"   # a tick only when all was read
        blocks = [section(f"{emoji} `{_safe(name, 200)}` ({d.input.lines} {t(lang, 'lines')}): {esc(head)}")]
        if unknown:
            blocks.append(section(_code(_safe("\n".join(u.strip() for u in unknown), 2000))))
        cut = False
    else:
        top = d.findings[0]
        label = symptom_name(lang, top.symptom)
        head = f"{EMOJI[top.severity]} {t(lang, 'root').capitalize() if lang == 'en' else t(lang, 'root')}: {label}"
        blocks = [{"type": "header", "text": {"type": "plain_text", "text": clip(head, MAX_HEADER), "emoji": True}}]
        if phrasing is not None and phrasing.answer is not None:
            blocks.append(section(_safe(phrasing.answer.summary, 2000)))
            blocks.append(context(t(lang, "phrased").format(model=phrasing.model)))
            phrased = {s.id: s.text for s in phrasing.answer.steps}
        body, cut = _finding_blocks(top, runbook_url, MAX_STEPS_SHOWN, lang, phrased)
        blocks += body
        if len(d.findings) > 1:
            others = "\n".join(f"• `{f.symptom}`{' (consequence of ' + f.caused_by + ')' if f.caused_by else ''}: "
                               f"{_safe(finding_title(lang, f), 300)}" for f in d.findings[1:6])
            blocks.append(section("*Also found*\n" + others))
            cut = True  # their steps only in the full text
        if d.input.truncated:
            blocks.append(context(":scissors: The input was larger than the size cap; only part of it was read."))
    if d.step_time:
        blocks.append(context(":stopwatch: " + esc(step_time_line(d.step_time, lang))))
    for note in d.input.notes[:3]:   # what was skipped, capped or not stored
        blocks.append(context(":information_source: " + _safe(note, 300)))
    info = f"`{_safe(name, 100)}` · {d.input.lines} lines"
    if diagnosis_id is not None:
        info += f" · diagnosis #{diagnosis_id}"
    versions = esc(" · ".join(f"{k} {v}" for k, v in d.versions.items() if v))
    if versions:
        info += f" · {versions}"
    blocks.append(context(info))
    if diagnosis_id is not None:
        blocks += vote if vote is not None else feedback_blocks(diagnosis_id)
    if len(blocks) > MAX_BLOCKS:
        blocks = blocks[: MAX_BLOCKS - 1] + [context("…more in the attached file.")]
        cut = True
    return blocks, cut


def fallback_text(d: Diagnosis) -> str:
    """The plain-text `text` Slack shows in notifications."""
    if not d.findings:
        return f"No known failure found in {_safe(d.input.name, 200)}"
    return _safe(f"Root cause: {d.findings[0].symptom}: {d.findings[0].title}", 300)


def evidence_blocks(asks: list, runbook_url: str | None = None) -> list[dict[str, Any]]:
    """What to run or paste so the next answer can name the cause, for a failure described without a log."""
    if not asks:
        return []
    lines = [f"• `{esc(what)}` — {esc(why)}" for ask in asks for what, why in ask.items]
    cites = sorted({c for ask in asks for c in ask.cite})
    return [section(clip("*No log here decides it yet. Run or paste these, then ask again:*\n" + "\n".join(lines),
                         MAX_SECTION - 10)), context(f"runbook: {cite_text(cites, runbook_url)}")]


def sections_blocks(question: str, sections: list, runbook_url: str | None = None) -> list[dict[str, Any]]:
    if not sections:
        return [section(f"I found no runbook section for _{_safe(question, 200)}_. Paste a log and I will "
                        "diagnose it.")]
    blocks: list[dict[str, Any]] = [section(f"Runbook sections for _{_safe(question, 200)}_:")]
    for s in sections:
        blocks.append(section(f"*{esc(s.title)}* ({cite_text([s.id], runbook_url)})\n{_safe(s.text, 1500)}"))
    return blocks


ATTACH_FAILED = (":warning: The full diagnosis (every step and finding) could not be attached here — the bot may not "
                 "be in this channel or allowed to upload files. Run `triage diagnose` on the log, or invite the bot "
                 "and ask again.")
USAGE = ("Usage: *Train Triage* reads a failed or slow training job's log and names the root cause with the runbook steps.\n"
         "• `/diagnose <paste a log>`: diagnose it (paste the end of the log: the error and a screen above it; "
         "NCCL_DEBUG=INFO lines help for hangs and EFA).\n"
         "• `/diagnose <question>`: the runbook sections that answer it (only you see the answer).\n"
         "• `/diagnose report`: this week's tuning report in this channel.\n"
         "• `/diagnose plan 70B 64 h100-80gb [slow]`: parallel layouts and memory per GPU before a launch.\n"
         "• `@triage` in a thread: diagnose every pasted log and attached `.log`/`.txt`/`.gz`/archive there; "
         "`@triage together` reads them as one job's per-node logs.\n"
         "• ⋯ → *Diagnose this message* on any message. Every answer has 👍/👎 and a 'wrong diagnosis' picker.")
HELP_WORDS = frozenset({"help", "usage", "?", "-h", "--help", "도움말", "사용법"})


def is_help(text: str) -> bool:
    return not text.strip() or text.strip().lower() in HELP_WORDS


def home_view(recent: list[dict[str, Any]], counts: dict[str, int]) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [{"type": "header", "text": {"type": "plain_text", "text": "Train Triage"}},
                                    section("*This week by symptom*\n" + ("\n".join(
                                        f"• `{esc(k)}`: {v}" for k, v in counts.items()) or "_nothing yet_")),
                                    {"type": "divider"}, section("*Last diagnoses*")]
    for r in recent[:10]:
        vote = {"up": " :+1:", "down": " :-1:"}.get(r.get("vote") or "", "")
        where = f" in <#{r['channel']}>" if r.get("channel") else ""
        blocks.append(section(f"#{r['id']} `{esc(str(r['top_symptom']))}`{vote}{where} · {r['created_at'][:16]}\n"
                              f"{_safe(r.get('top_title') or '', 400)}"))
    if not recent:
        blocks.append(context("No diagnoses yet. Try `/diagnose` with a log."))
    return {"type": "home", "blocks": blocks[:MAX_BLOCKS]}
