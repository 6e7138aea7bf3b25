"""The Slack app: thin Bolt listeners over the pure triage core. Every diagnosis is stored before it is posted."""
from __future__ import annotations

import functools
import logging
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from slack_bolt import App
from slack_sdk import WebClient

from bot.slack import blocks as kit
from bot.answer.i18n import t
from bot.answer.mrkdwn import outgoing, runbook_links
from bot.store.journal import Journal, crash_point
from bot.slack.outbox import Outbox
from bot.slack.ratelimit import RateLimiter
from bot.answer.render import diagnosis_text
from bot.service import Triage
from bot.settings import Settings
from bot.slack.feedback import FeedbackHandlers
from bot.slack.work import NOT_HERE, WorkHandlers
from bot.slack.calls import react
from bot.slack.config import diff_blocks, split_configs
from bot.slack.inputs import Input, Spool, allowed_file_hosts, looks_like_log, message_inputs, message_text, wants_together
from bot.slack.client import slack_client
from bot.slack.workqueue import WorkQueue
from core.ingest import UnusableInput
from knowledge.evidence import asks_for
from core.inputs import Joined
from core.models import Diagnosis

log = logging.getLogger("triage.slack")
# Bolt reads SLACK_BOT_TOKEN from the environment itself and then warns that the client we pass (which carries the
# same token and, in tests, another base URL) wins. That is what we want: keep the start-up output clean.
log.addFilter(lambda record: "will be unused" not in record.getMessage())


def create_app(settings: Settings, triage: Triage, client: WebClient | None = None) -> App:
    token = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else None
    secret = settings.slack_signing_secret.get_secret_value() if settings.slack_signing_secret else None
    client = client or slack_client(settings)
    # Bolt runs ack functions on its listener executor; the heavy work goes to the bot's own small pool (see
    # SlackBot.offload), so a burst of diagnoses never makes an ack wait for a free thread.
    app = App(signing_secret=secret, client=client, request_verification_enabled=secret is not None, logger=log,
              listener_executor=ThreadPoolExecutor(max_workers=32, thread_name_prefix="triage-listener"))
    bot = SlackBot(settings, triage, token or "")
    bot.client = client
    bot.register(app)
    app.triage_bot = bot  # for `triage serve`: the outbox worker
    return app


class SlackBot(FeedbackHandlers, WorkHandlers):
    def __init__(self, settings: Settings, triage: Triage, token: str):
        self.settings = settings
        self.triage = triage
        self.token = token
        self.hosts = allowed_file_hosts(settings.slack_api_base_url)
        self._langs: dict[str, str] = {}
        self.limiter = RateLimiter.parse(settings.rate_limit)
        # One admission decision per /diagnose: Bolt starts the ack function and the lazy listener at the same
        # time, so whichever runs first decides (and reserves the work queue's place), the other reads it.
        self._admission: OrderedDict[str, str] = OrderedDict()
        self._begun: OrderedDict[str, tuple[int, str] | None] = OrderedDict()   # journaled before the ack
        self._admit_lock = threading.Lock()
        store = triage.store
        self.outbox = Outbox(store, on_sent=lambda did, ch, ts: did and ts and store.set_message(did, ch, ts)) \
            if store else None
        self.journal = Journal(store) if store else None   # accepted work, resumed after a crash (bot.store.journal)
        self.work = WorkQueue(workers=2)
        self.client: WebClient | None = None   # create_app's client (bot.slack.client.slack_client: defuses mrkdwn)

    def lang(self, client: WebClient, user: str | None) -> str:
        """The asker's language from their Slack locale (users.info), remembered per user."""
        if not user:
            return "en"
        if user not in self._langs:
            try:
                locale = client.users_info(user=user, include_locale=True)["user"].get("locale", "")
            except Exception:
                locale = ""
            self._langs[user] = "ko" if str(locale).lower().startswith("ko") else "en"
        return self._langs[user]

    # ---- helpers -------------------------------------------------------------------------------------------
    def allowed(self, channel: str | None) -> bool:
        return not self.settings.allowed_channels or (channel or "") in self.settings.allowed_channels

    def answer(self, d: Diagnosis, did: int | None, lang: str = "en", phrasing=None) -> tuple[list[dict], str, bool]:
        """The answer's blocks: deterministic, or with an accepted LLM phrasing's prose when one is given."""
        blocks, cut = kit.diagnosis_blocks(d, did, self.settings.runbook_url, lang=lang, phrasing=phrasing)
        return blocks, kit.fallback_text(d), cut

    def phrased(self, d: Diagnosis, did: int | None, lang: str = "en"):
        """An accepted LLM phrasing of the diagnosis, or None (no LLM, nothing to phrase, rejected, failed).
        Asked only after the deterministic answer is out: the model is never in the way of an answer."""
        if not (self.triage.phraser and d.findings):
            return None
        try:
            p = self.triage.phraser.phrase(d, lang, did)
        except Exception as e:   # the phraser already turns model failures into reasons; this is a last guard
            log.warning("phrasing failed: %s", type(e).__name__)
            return None
        return p if p.answer is not None else None

    def post_diagnosis(self, client: WebClient, channel: str, thread_ts: str | None, d: Diagnosis, did: int | None,
                       lang: str = "en", blocks_text=None, decorate=None, later: list | None = None) -> str | None:
        """Post (or queue in the outbox) the deterministic answer; the message ts when Slack took it now, None when
        it waits for a retry. With an LLM configured, the posted message is then replaced (chat.update) by the
        phrased answer when the guard accepts one. `decorate` wraps both versions the same way (a notify header);
        `later` collects that replacement for the caller to run once all of its deterministic answers are out."""
        blocks, text, cut = blocks_text or self.answer(d, did, lang)
        if decorate is not None:
            blocks, text = decorate(blocks, text)
        payload = {"channel": channel, "blocks": blocks, "text": text}
        if thread_ts:
            payload["thread_ts"] = thread_ts
        crash_point("before-post")   # tests only: kill -9 between storing a diagnosis and posting it
        if self.outbox is not None:
            ts = self.outbox.post(client, payload, did)
        else:
            ts = client.chat_postMessage(**payload)["ts"]
        crash_point("after-post")
        if ts and cut and not self._attach_full(client, channel, thread_ts, d, did, lang):
            try:
                client.chat_postMessage(channel=channel, thread_ts=thread_ts or ts, text=kit.ATTACH_FAILED)
            except Exception as e:
                log.warning("could not say the attachment failed: %s", type(e).__name__)
        if ts and self.triage.phraser and d.findings:
            def update() -> None:
                self._update_phrased(client, channel, ts, d, did, lang, decorate)
            if later is None:
                update()
            else:
                later.append(update)
        return ts

    def _update_phrased(self, client: WebClient, channel: str, ts: str, d: Diagnosis, did: int | None, lang: str,
                        decorate=None) -> None:
        """Replace a posted deterministic answer by its accepted phrasing; on any failure the posted one stays."""
        phrasing = self.phrased(d, did, lang)
        if phrasing is None:
            return
        blocks, text, _ = self.answer(d, did, lang, phrasing)
        if decorate is not None:
            blocks, text = decorate(blocks, text)
        try:
            client.chat_update(channel=channel, ts=ts, blocks=blocks, text=text)
        except Exception as e:
            log.warning("could not replace the answer with its phrasing: %s", type(e).__name__)

    def _attach_full(self, client: WebClient, channel: str, thread_ts: str | None, d: Diagnosis,
                     did: int | None, lang: str = "en") -> bool:
        """Upload the full text diagnosis beside a shortened answer; False when Slack refused it (bot not in the
        channel, a DM, no files:write), so the caller can say so instead of leaving '+N more' unexplained."""
        kwargs: dict[str, Any] = {"channel": channel, "content": diagnosis_text(d, lang),
                                  "filename": f"diagnosis-{did or 'full'}.txt", "title": "Full diagnosis"}
        if thread_ts:
            kwargs["thread_ts"] = thread_ts
        try:
            client.files_upload_v2(**kwargs)
            return True
        except Exception as e:
            log.warning("could not attach the full diagnosis: %s", type(e).__name__)
            return False

    def _diagnose_inputs(self, inputs: list[Input], meta: dict[str, str],
                         lang: str = "en") -> list[tuple[Input, Diagnosis | None, int | None, str]]:
        out = []
        for inp in inputs:
            try:
                for name, d, did, err in self.triage.run_all(inp.content, inp.name, lang, keep_empty=not inp.maybe_chat,
                                                             **meta):
                    out.append((Input(name, b"", inp.note), d, did, err))
            except UnusableInput as e:
                out.append((inp, None, None, str(e)))
        return out

    def _diagnose_together(self, inputs: list[Input], meta: dict[str, str],
                           lang: str = "en") -> list[tuple[Input, Diagnosis | None, int | None, str]]:
        name = Joined.title([i.name for i in inputs])
        try:
            d, did = self.triage.run_together([(i.name, i.content) for i in inputs], name, lang, **meta)
        except UnusableInput as e:
            return [(Input(name, b""), None, None, str(e))]
        if any(i.note for i in inputs):
            d.input.truncated = True
        return [(Input(name, b""), d, did, "")]

    # ---- listeners -----------------------------------------------------------------------------------------
    def register(self, app: App) -> None:
        out = functools.partial(outgoing, client=self.client, links=runbook_links(self.settings.runbook_url))
        app.middleware(self.dedupe)
        app.command("/diagnose")(ack=self.ack_diagnose, lazy=[out(self.offload(self.run_diagnose))])
        app.event("app_mention")(out(self.offload(self.on_mention)))
        app.shortcut("diagnose_message")(ack=self.ack_shortcut, lazy=[out(self.offload(self.run_shortcut))])
        app.action("triage_vote_up")(out(self.on_vote))
        app.action("triage_vote_down")(out(self.on_vote))
        app.action("triage_wrong")(out(self.on_vote))
        app.action("triage_cause")(out(self.on_cause_button))
        app.view("triage_cause")(out(self.on_cause_submit))
        app.event("app_home_opened")(out(self.on_home))
        app.event("message")(lambda: None)  # thread chatter is read on mention only

    def ack_diagnose(self, ack, command: dict) -> None:
        ack(text=self.admit(command, write_down=True) or ":mag: Diagnosing…")

    def run_diagnose(self, command: dict, respond, client: WebClient) -> None:
        text = (command.get("text") or "").strip()
        channel = command.get("channel_id", "")
        if self.admit(command):
            return
        meta = {"source": "slash", "team": command.get("team_id", ""), "channel": channel,
                "user": command.get("user_id", "")}
        body = message_text(text)
        if body.lower() == "report":
            self._post_report(client, channel, respond)
            return
        if body.lower().startswith("plan ") or body.lower() == "plan":
            self._post_plan(body[4:], respond)
            return
        lang = self.lang(client, command.get("user_id"))
        try:
            d, did = self.triage.run(body.encode(), "pasted log", lang, **meta) if body else (None, None)
        except UnusableInput as e:
            respond(text=f":warning: {e}", response_type="ephemeral")
            return
        if d is not None and not d.findings and not looks_like_log(body):
            respond(blocks=self._question_blocks(body, lang), text=f"Runbook sections for: {kit.esc(body[:100])}",
                    response_type="ephemeral")   # an answer to one person's question goes to that person
            return
        blocks, fallback, cut = self.answer(d, did, lang)
        try:
            r = respond(blocks=blocks, text=fallback, response_type="in_channel")
            ok = getattr(r, "status_code", 200) == 200
        except Exception:
            ok = False
        if ok:   # an answer through response_url cannot be looked up: struck off now, never run again after a crash
            self.answered()
        if not ok:  # response_url failed: post to the channel, through the outbox if Slack is down
            self.post_diagnosis(client, channel, None, d, did, lang, (blocks, fallback, False))
            return
        if cut and not self._attach_full(client, channel, None, d, did, lang):
            respond(text=kit.ATTACH_FAILED, response_type="ephemeral")
        phrasing = self.phrased(d, did, lang) if d is not None else None
        if phrasing is not None:   # the deterministic answer is out; its phrasing replaces it in place
            blocks, fallback, _ = self.answer(d, did, lang, phrasing)
            try:
                respond(blocks=blocks, text=fallback, response_type="in_channel", replace_original=True)
            except Exception as e:
                log.warning("could not replace the answer with its phrasing: %s", type(e).__name__)

    def _post_plan(self, words: str, respond) -> None:
        from bot.answer.plan import plan_text
        try:
            text = plan_text(words)
        except ValueError as e:
            respond(text=f":warning: {kit.esc(str(e))}", response_type="ephemeral")
            return
        blocks = [{"type": "section", "text": {"type": "mrkdwn", "text": "```" + kit.esc(text)[:2900] + "```"}}]
        respond(blocks=blocks, text=kit.esc(text.splitlines()[0]), response_type="in_channel")

    def _post_report(self, client: WebClient, channel: str, respond) -> None:
        from bot import report
        if self.triage.store is None:
            respond(text="No store is configured, so there is nothing to report.", response_type="ephemeral")
            return
        # only this channel's diagnoses: a report asked for anywhere must not show other (private) channels' ones
        report.post(client, channel, report.last_week(self.triage.store, (channel,)))

    def _question_blocks(self, question: str, lang: str) -> list[dict]:
        sections = self.triage.runbook.search(question)
        asks = asks_for(question)   # a failure described without a log: what would decide it comes first
        blocks = kit.evidence_blocks(asks, self.settings.runbook_url)
        blocks += kit.sections_blocks(question, sections, self.settings.runbook_url) if sections or not asks else []
        answer = self.triage.phraser.answer_question(question, sections, lang) if self.triage.phraser else None
        if answer:
            blocks = [kit.section(kit.esc(answer)), kit.context(t(lang, "phrased").format(model=self.triage.phraser.cfg.label))] + blocks
        return blocks[: kit.MAX_BLOCKS]

    def on_mention(self, event: dict, client: WebClient, context) -> None:
        channel, ts = event["channel"], event["ts"]
        root = event.get("thread_ts") or ts
        if not self.allowed(channel):
            client.chat_postMessage(channel=channel, thread_ts=root, text=NOT_HERE)
            return
        if not self.limiter.allow(event.get("user", "")):
            client.chat_postMessage(channel=channel, thread_ts=root, text=self.limiter.message(event.get("user", "")))
            return
        if message_text(event.get("text", "")).lower() in kit.HELP_WORDS:   # a bare mention triages the thread
            client.chat_postMessage(channel=channel, thread_ts=root, text=kit.USAGE)
            return
        react(client, channel, ts, "eyes")
        spool = Spool(self.settings.max_thread_bytes)   # the thread's files on disk, removed when answered
        try:
            replies = client.conversations_replies(channel=channel, ts=root, limit=200)
            bot_user = context.get("bot_user_id")
            inputs, notes = [], []
            for i, msg in enumerate(replies.get("messages", [])):
                if msg.get("bot_id") or (bot_user and msg.get("user") == bot_user):
                    continue
                got, skipped = message_inputs(msg, self.token, self.settings.max_file_bytes, self.hosts,
                                              f"message {i + 1}", spool)
                inputs += got
                notes += skipped
            inputs, configs, more = split_configs(inputs)   # a DeepSpeed/HF config or launch script: a diff of it
            notes += more
            meta = {"source": "mention", "team": event.get("team", ""), "channel": channel,
                    "user": event.get("user", ""), "thread_ts": root}
            lang = self.lang(client, event.get("user"))
            logs = [i for i in inputs if not i.maybe_chat]
            if wants_together(event.get("text", "")) and logs:   # several files, or one archive of them
                results = self._diagnose_together(logs, meta, lang)
            else:
                results = self._diagnose_inputs(inputs, meta, lang)
            self._reply_thread(client, channel, root, results, notes, event.get("text", ""), lang, configs)
            react(client, channel, ts, "eyes", remove=True)
            react(client, channel, ts, "white_check_mark")
        except Exception as e:
            log.error("mention in %s failed: %s", channel, type(e).__name__)
            react(client, channel, ts, "exclamation")
            client.chat_postMessage(channel=channel, thread_ts=root,
                                    text=":warning: Triage failed on this thread; the error is in the bot's log.")
        finally:
            spool.close()

    def _reply_thread(self, client: WebClient, channel: str, root: str, results, notes: list[str],
                      mention_text: str, lang: str, configs: list[tuple[str, str]] = ()) -> None:
        answered, later = 0, []
        for inp, d, did, err in results:
            if d is None:
                notes.append(f"`{inp.name}`: {err}")
                continue
            if not d.findings and not d.unclaimed and inp.name.endswith("(pasted text)"):
                continue  # ordinary conversation in the thread (a pasted crash nobody recognises is still answered)
            if inp.note:
                d.input.truncated = True
            self.post_diagnosis(client, channel, root, d, did, lang, later=later)
            answered += 1
            for name, text in configs if d.findings else ():
                blocks = diff_blocks(d, name, text)
                if blocks:
                    client.chat_postMessage(channel=channel, thread_ts=root, blocks=blocks,
                                            text=f"Fix as a diff of {kit.esc(name)}")
        if not answered:
            question = message_text(mention_text)
            if question and (asks_for(question) or self.triage.runbook.search(question)):
                client.chat_postMessage(channel=channel, thread_ts=root, text="Runbook sections",
                                        blocks=self._question_blocks(question, lang))
            else:
                client.chat_postMessage(channel=channel, thread_ts=root, text=(
                    "No known failure found in this thread's logs and files." if results
                    else "I found no log in this thread. Paste one or attach a .log/.txt/.gz file and mention me."))
        self._post_notes(client, channel, root, notes)
        for update in later:   # every deterministic answer is out; now their phrasings, one at a time
            update()

    def ack_shortcut(self, ack, body: dict) -> None:
        self.write_down("run_shortcut", body.get("trigger_id") or "", {"body": body})
        ack()

    def run_shortcut(self, body: dict, client: WebClient) -> None:
        msg = body.get("message", {})
        channel = body.get("channel", {}).get("id", "")
        root = msg.get("thread_ts") or msg.get("ts")
        user = body.get("user", {}).get("id", "")
        if not self.allowed(channel) or not self.limiter.allow(user):
            client.chat_postEphemeral(channel=channel, user=user,
                                      text=NOT_HERE if not self.allowed(channel) else self.limiter.message(user))
            return
        meta = {"source": "shortcut", "team": body.get("team", {}).get("id", ""), "channel": channel, "user": user,
                "thread_ts": root or ""}
        lang = self.lang(client, user)
        with Spool(self.settings.max_thread_bytes) as spool:
            inputs, notes = message_inputs(msg, self.token, self.settings.max_file_bytes, self.hosts, "message", spool)
            results = self._diagnose_inputs(inputs, meta, lang)
        posted, later = False, []
        for inp, d, did, err in results:
            if d is None:
                notes.append(f"`{inp.name}`: {err}")
                continue
            self.post_diagnosis(client, channel, root, d, did, lang, later=later)
            posted = True
        if not posted:
            client.chat_postMessage(channel=channel, thread_ts=root, text="I found no log in that message.")
        self._post_notes(client, channel, root, notes)
        for update in later:
            update()

    @staticmethod
    def _post_notes(client: WebClient, channel: str, root: str, notes: list[str]) -> None:
        if notes:
            client.chat_postMessage(channel=channel, thread_ts=root, text="Notes: " + kit.esc("; ".join(notes[:10])))
