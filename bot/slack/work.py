"""How Slack work is taken on: admitted or refused (rate limit, allowed channels, a full queue), written down in the
journal before it starts and struck off when it ends (bot.store.journal), run on the bot's own pool, and resumed after a
crash by the next `triage serve`."""
from __future__ import annotations

import functools
import logging
import sqlite3
import threading

from slack_bolt import BoltResponse
from slack_sdk import WebClient

from bot.slack import post_once
from bot.slack import blocks as kit
from bot.answer.mrkdwn import outgoing, runbook_links

log = logging.getLogger("triage.slack")
_running = threading.local()   # the journal entry of the job this pool thread runs
NOT_HERE = "Train Triage is not enabled in this channel. Ask an admin to add it to TRIAGE_ALLOWED_CHANNELS."


def _trigger(command: dict) -> str:
    return command.get("trigger_id") or command.get("response_url") or ""


def request_of(kind: str, kwargs: dict) -> dict:
    """What a job needs to run again in another process: the event, shortcut body or command (never a client)."""
    if kind == "on_mention":
        return {"event": kwargs.get("event"), "bot_user_id": (kwargs.get("context") or {}).get("bot_user_id")}
    if kind == "run_shortcut":
        return {"body": kwargs.get("body")}
    return {"command": kwargs.get("command")}


class WorkHandlers:
    """Mixed into SlackBot (bot.slack.app), which provides settings, triage, work, journal, limiter, client and the
    listeners themselves."""

    def dedupe(self, body: dict, context, next) -> BoltResponse | None:
        """Bolt middleware: a retried event is not run twice, and a new mention is seen and written down (bot.journal)
        in one transaction before it is acked (bot.server acks after this): Slack never resends an acked event, and
        the retry of one whose process died before the ack finds it seen and written down, to be resumed."""
        event_id, store = body.get("event_id"), self.triage.store
        if event_id and store:
            event = body.get("event") or {}
            try:
                with store.write():
                    if not store.first_time(event_id):
                        return BoltResponse(status=200, body="")
                    if event.get("type") == "app_mention" and self.journal:
                        context["triage_job"] = self.journal.begin("on_mention", request_of(
                            "on_mention", {"event": event, "context": context}))
            except sqlite3.Error as e:   # the store cannot take it: answer anyway, never drop an event
                log.error("event %s not written down: %s", event_id, type(e).__name__)
        return next()

    def offload(self, fn):
        """Run a heavy listener on the bot's own pool; Bolt's threads stay free to ack within Slack's 3 s."""
        @functools.wraps(fn)
        def submit(**kwargs):
            command = kwargs.get("command")
            if command is not None and self.admit(command):   # a /diagnose: its ack said why it is not run
                return
            run, entry = self._job(fn, kwargs, begun=self._begun_for(fn.__name__, kwargs))
            if command is not None:
                self.work.submit(run, reserved=True)
            elif not self.work.submit(run):
                if entry and self.journal:
                    self.journal.done(entry[0])
                self._busy(**kwargs)
        return submit

    def _begun_for(self, kind: str, kwargs: dict) -> tuple[int, str] | None:
        """The job's journal entry when it was written down before its ack: a mention's by dedupe, a /diagnose's or
        a shortcut's by write_down (by its ack, or now if this listener came first)."""
        if kwargs.get("command") is not None:
            return self.write_down(kind, _trigger(kwargs["command"]), request_of(kind, kwargs))
        if kind == "run_shortcut":
            return self.write_down(kind, (kwargs.get("body") or {}).get("trigger_id") or "", request_of(kind, kwargs))
        return (kwargs.get("context") or {}).get("triage_job")

    def _job(self, fn, kwargs: dict, resumed: tuple[int, str] | None = None, begun: tuple[int, str] | None = None):
        """The job as the pool runs it (journaled: struck off when it ends, however it ends), and its journal entry
        (`begun`: written down already, before the ack)."""
        entry = resumed or begun or (self.journal.begin(fn.__name__, request_of(fn.__name__, kwargs))
                                     if self.journal else None)

        def run():
            _running.entry = entry
            try:
                with post_once.job(entry[1] if entry else "", resumed=resumed is not None):
                    fn(**kwargs)
            except Exception as e:
                log.error("%s failed: %s", fn.__name__, type(e).__name__)
            finally:
                _running.entry = None
                if entry and self.journal:
                    self.journal.done(entry[0])
        return run, entry

    def answered(self) -> None:
        """Strike the running job off now: its answer is out and cannot be found again to skip it (a response_url)."""
        entry = getattr(_running, "entry", None)
        if entry and self.journal:
            self.journal.done(entry[0])

    def resume(self) -> int:
        """Run again the jobs a dead process left unfinished (at start-up); how many were taken."""
        if self.journal is None:
            return 0
        from slack_bolt.context.respond import Respond
        out = functools.partial(outgoing, client=self.client, links=runbook_links(self.settings.runbook_url))
        taken = 0
        for row in self.journal.orphans():
            req, kind = row["request"], row["kind"]
            if kind == "on_mention" and req.get("event"):
                fn, kwargs = self.on_mention, {"event": req["event"], "client": self.client,
                                               "context": {"bot_user_id": req.get("bot_user_id")}}
            elif kind == "run_shortcut" and req.get("body"):
                fn, kwargs = self.run_shortcut, {"body": req["body"], "client": self.client}
            elif kind == "run_diagnose" and (req.get("command") or {}).get("response_url"):
                cmd = req["command"]
                fn, kwargs = self.run_diagnose, {"command": cmd, "client": self.client,
                                                 "respond": Respond(response_url=cmd["response_url"])}
            else:
                self.journal.done(row["id"])
                continue
            admitted = not self.admit(kwargs["command"]) if "command" in kwargs else self.work.reserve()
            if not admitted:
                self.journal.done(row["id"])
                continue
            run, _ = self._job(out(fn), kwargs, (row["id"], row["key"]))
            self.work.submit(run, reserved=True)
            taken += 1
        if taken:
            log.warning("resumed %d job(s) a stopped process left unfinished", taken)
        return taken

    def write_down(self, kind: str, key: str, request: dict) -> tuple[int, str] | None:
        """The journal entry of a /diagnose or shortcut, written once, whichever of its ack and its lazy listener
        comes first (Bolt starts both at once): written before the ack, so a process killed after acking loses
        nothing (Slack never resends a command or shortcut). None without a key: the listener writes its own."""
        if not key or self.journal is None:
            return None
        with self._admit_lock:
            if key not in self._begun:
                self._begun[key] = self.journal.begin(kind, request)
                while len(self._begun) > 1000:
                    self._begun.popitem(last=False)
            return self._begun[key]

    def admit(self, command: dict, write_down: bool = False) -> str:
        """'' when this /diagnose runs (its place in the work queue is then reserved, and the job written down),
        else what to answer instead. Decided once per command, whichever of its ack and its lazy listener asks
        first."""
        key = _trigger(command)
        decision = self._admit(command, key)
        if not decision and write_down:
            self.write_down("run_diagnose", key, {"command": command})
        return decision

    def _admit(self, command: dict, key: str) -> str:
        with self._admit_lock:
            if key in self._admission:
                return self._admission[key]
            text = (command.get("text") or "").strip()
            user = command.get("user_id", "")
            if not self.allowed(command.get("channel_id")):
                decision = NOT_HERE
            elif kit.is_help(text):
                decision = kit.USAGE
            elif not self.limiter.allow(user):
                decision = self.limiter.message(user)
            elif not self.work.reserve():
                decision = self.work.message()
            else:
                decision = ""
            self._admission[key] = decision
            while len(self._admission) > 1000:
                self._admission.popitem(last=False)
            return decision

    def _busy(self, client: WebClient, event: dict | None = None, body: dict | None = None, respond=None,
              command: dict | None = None, **_) -> None:
        """The queue is full: say so where the answer would have gone (a /diagnose is told at its ack instead)."""
        try:
            if respond is not None:
                respond(text=self.work.message(), response_type="ephemeral")
            elif event is not None:
                client.chat_postMessage(channel=event["channel"], thread_ts=event.get("thread_ts") or event["ts"],
                                        text=self.work.message())
            elif body is not None and body.get("type") == "message_action":
                client.chat_postEphemeral(channel=body.get("channel", {}).get("id", ""),
                                          user=body.get("user", {}).get("id", ""), text=self.work.message())
        except Exception as e:
            log.warning("could not say the bot is busy: %s", type(e).__name__)
