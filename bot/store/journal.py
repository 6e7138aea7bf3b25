"""Accepted Slack work (a mention, a shortcut, a /diagnose) is written down before it starts and struck off when it
ends, so a process killed in between (kill -9, OOM killer, a node lost) loses nothing: the next `triage serve` on
the database resumes it. Slack does not resend an event it got a 200 for, so without this the answer is gone.

A resumed job runs again from its request (values masked, as everything in the store); its posts carry the same
keys as the first run's (bot.slack.post_once.job), and each is looked up in Slack before it is posted, so what the first
run already posted is not posted twice."""
from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sqlite3
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from bot.store.store import Store, now
from core.redact import mask_value

log = logging.getLogger("triage.journal")
LEASE_S = 900   # a job still unfinished after this long is taken over even when its owner looks alive
HOST = socket.gethostname()


def crash_point(name: str) -> None:
    """For the crash tests only: TRIAGE_TEST_CRASH=<name> kills this process with SIGKILL at that point."""
    if os.environ.get("TRIAGE_TEST_CRASH") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _alive(owner: str, me: str) -> bool:
    """Whether the process that owns a job still runs (knowable on this host only; elsewhere the lease decides).
    An owner is host:pid:token; a restarted container reuses its pid, never its token."""
    host, pid, _ = (owner.split(":") + ["", ""])[:3]
    if host != HOST or not pid.isdigit():
        return True
    if int(pid) == os.getpid():
        return owner == me
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


class Journal:
    def __init__(self, store: Store):
        self.store = store
        self.owner = f"{HOST}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    def begin(self, kind: str, request: dict[str, Any]) -> tuple[int, str] | None:
        """Write the job down before it starts; (id, post key prefix), or None when the database cannot take it
        (the job still runs: a full disk must not cost the answer)."""
        key = uuid.uuid4().hex
        try:
            with self.store.write() as db:
                jid = db["work"].insert({"created_at": now(), "kind": kind, "key": key, "owner": self.owner,
                                         "request_json": json.dumps(mask_value(request), ensure_ascii=False)}).last_pk
            return int(jid), key
        except sqlite3.Error as e:
            log.error("job not written down (it runs, but a crash now would lose it): %s", type(e).__name__)
            return None

    def done(self, jid: int) -> None:
        try:
            with self.store.write() as db:
                db.execute("delete from work where id = ?", [jid])
        except sqlite3.Error as e:
            log.error("job %s not struck off (it may run again after a restart): %s", jid, type(e).__name__)

    def orphans(self) -> list[dict[str, Any]]:
        """Jobs whose process died before finishing them (or whose lease ran out), claimed for this process."""
        cutoff = (datetime.now(timezone.utc) - timedelta(seconds=LEASE_S)).isoformat(timespec="seconds")
        taken = []
        # read them all first: a claim (a write) inside the still-open SELECT fails at once with "database is
        # locked" when another process wrote since the SELECT began (its snapshot is stale), whatever busy_timeout says
        for row in list(self.store.db.query("select * from work order by id")):
            if row["owner"] == self.owner or (_alive(row["owner"], self.owner) and row["created_at"] > cutoff):
                continue
            with self.store.write() as db:   # claim it: another process resuming at the same time skips it
                cur = db.execute("update work set owner = ?, created_at = ? where id = ? and owner = ?",
                                 [self.owner, now(), row["id"], row["owner"]])
            if cur.rowcount == 1:
                row["request"] = json.loads(row["request_json"])
                taken.append(row)
        return taken
