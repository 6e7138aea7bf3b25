"""Answers that could not be posted (Slack down, 429, 5xx) wait in the store's outbox and are retried with
back-off, also after a restart. A diagnosis is never lost because Slack was unavailable when it was made."""
from __future__ import annotations

import json
import logging
import os
import socket
import threading
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from slack_sdk.errors import SlackApiError, SlackClientError

from bot.slack.post_once import find_posted, mark
from bot.store.store import Store, now

log = logging.getLogger("triage.outbox")
BACKOFF = (5, 30, 120, 600, 1800, 3600)  # seconds before attempt 2, 3, …; the last repeats
MAX_ATTEMPTS = 24
LEASE_S = 120      # a claimed item goes back to the others if its poster has not finished by then


def _transient(e: Exception) -> bool:
    if isinstance(e, SlackApiError):
        status = getattr(e.response, "status_code", 0) or 0
        return status == 429 or status >= 500 or e.response.get("error") in ("ratelimited", "internal_error",
                                                                              "fatal_error", "service_unavailable")
    return isinstance(e, (SlackClientError, OSError, TimeoutError))


class Outbox:
    def __init__(self, store: Store, on_sent: Callable[[int | None, str, str], None] | None = None):
        self.store = store
        self.on_sent = on_sent or (lambda did, channel, ts: None)
        self._stop = threading.Event()
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"

    def post(self, client, payload: dict[str, Any], diagnosis_id: int | None = None) -> str | None:
        """chat.postMessage now; on a transient failure keep it for later. Returns the message ts when sent. The post
        carries its key (bot.slack.post_once) from the first attempt, so a retry can find it when Slack took it after all."""
        payload = mark(payload)
        try:
            resp = client.chat_postMessage(**payload)
        except Exception as e:
            if not _transient(e):
                raise
            self._enqueue(payload, diagnosis_id, f"{type(e).__name__}")
            return None
        self.on_sent(diagnosis_id, payload["channel"], resp.get("ts", ""))
        return resp.get("ts")

    def _enqueue(self, payload: dict[str, Any], diagnosis_id: int | None, why: str) -> None:
        due = (datetime.now(timezone.utc) + timedelta(seconds=BACKOFF[0])).isoformat(timespec="seconds")
        with self.store.write():
            # the post's key (in its metadata) is kept with it: every retry first looks for it in Slack
            self.store.db["outbox"].insert({
                "created_at": now(), "diagnosis_id": diagnosis_id, "payload_json": json.dumps(mark(payload),
                                                                                             ensure_ascii=False),
                "attempts": 1, "next_at": due, "status": "pending", "last_error": why})
        log.warning("Slack post failed (%s); answer for diagnosis %s queued for retry", why, diagnosis_id)

    def pending(self) -> list[dict[str, Any]]:
        return list(self.store.db.query("select * from outbox where status in ('pending', 'posting') order by id"))

    def _claim(self, item: dict[str, Any], at: str) -> bool:
        """Take the item for this process, in one write transaction: a pending one that is due, or one whose
        poster's lease ran out (that process died mid-post). Another `triage serve` on the database then skips it."""
        lease = (datetime.fromisoformat(at) + timedelta(seconds=LEASE_S)).isoformat(timespec="seconds")
        with self.store.write() as db:
            cur = db.execute("update outbox set status = 'posting', owner = ?, lease_until = ? where id = ? and "
                             "((status = 'pending' and next_at <= ?) or (status = 'posting' and lease_until < ?))",
                             [self.owner, lease, item["id"], at, at])
            return cur.rowcount == 1

    def drain(self, client, at: datetime | None = None) -> int:
        """Retry every item that is due; return how many were delivered."""
        at = at or datetime.now(timezone.utc)
        stamp, sent = at.isoformat(timespec="seconds"), 0
        for item in self.pending():
            if not self._claim(item, stamp):
                continue
            payload = json.loads(item["payload_json"])
            try:
                # Slack may hold it already (a reply lost after it took the post, or a poster killed mid-post)
                ts = find_posted(client, payload) or client.chat_postMessage(**payload).get("ts", "")
            except Exception as e:
                attempts = item["attempts"] + 1
                status = "pending" if _transient(e) and attempts < MAX_ATTEMPTS else "failed"
                delay = BACKOFF[min(attempts - 1, len(BACKOFF) - 1)]
                with self.store.write():
                    self.store.db["outbox"].update(item["id"], {
                        "attempts": attempts, "status": status, "last_error": type(e).__name__, "owner": None,
                        "next_at": (at + timedelta(seconds=delay)).isoformat(timespec="seconds")})
                continue
            with self.store.write():
                self.store.db["outbox"].update(item["id"], {"status": "sent", "attempts": item["attempts"] + 1,
                                                           "sent_ts": ts})
            self.on_sent(item["diagnosis_id"], payload["channel"], ts)
            sent += 1
        return sent

    def start(self, client, every: float = 5.0) -> threading.Thread:
        def loop():
            while True:
                try:
                    self.drain(client)
                except Exception as e:  # the loop must survive anything
                    log.error("outbox drain failed: %s", type(e).__name__)
                if self._stop.wait(every):
                    return
        th = threading.Thread(target=loop, name="outbox", daemon=True)
        th.start()
        return th

    def stop(self) -> None:
        self._stop.set()
