"""The soak's fake Slack (bench/soak.py, issue 31): FakeSlack with a seeded fault schedule on the bot's posts and
response_url answers, every answer attributed to the request it belongs to, and a kill switch for one server."""
from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from urllib.parse import urlparse

from testkit.fakeslack import FakeSlack

POST_FAULTS = ("429", "500-before", "503-after", "drop-before", "drop-after")
POST = "chat.postMessage"


@dataclass
class Req:
    i: int
    kind: str          # mention | slash | shortcut
    channel: str
    body: str
    ctype: str
    dupe: bool = False   # re-sent after its ack, as Slack does when it thinks the ack was late
    t0: float = 0.0
    deliveries: list = field(default_factory=list)   # (server, status or error)
    acked: bool = False
    busy: bool = False
    answers: list = field(default_factory=list)      # (time, via, post key)
    other: list = field(default_factory=list)        # other replies in its thread (notes, warnings)

    @property
    def expected(self) -> bool:
        return self.acked and not self.busy


# ---- the fake Slack, with a seeded fault schedule, answers attributed to requests, and the kill ---------------------
class SoakSlack(FakeSlack):
    def __init__(self, seed: int, fault_rate: float, response_fault_rate: float):
        self._local = threading.local()   # set before the base class builds its handler
        super().__init__()
        self.rng = random.Random(seed)
        self.fault_rate, self.response_fault_rate = fault_rate, response_fault_rate
        self.lock = threading.Lock()
        self.injected: Counter = Counter()
        self.attempts: Counter = Counter()   # post key -> chat.postMessage calls carrying it
        self.faulted: Counter = Counter()
        self.by_thread: dict[tuple[str, str], Req] = {}
        self.by_channel: dict[str, Req] = {}   # a /diagnose's own channel (its fallback post)
        self.by_response: dict[str, Req] = {}
        self.on_answer = lambda: None
        self.kill: dict | None = None   # armed: {"token", "proc", "mode"}
        self.killed: dict | None = None

    def _handler(self):
        base, fake = super()._handler(), self

        class H(base):
            def do_POST(self):
                fake._local.auth = self.headers.get("Authorization", "")
                fake._local.path = urlparse(self.path).path
                if fake._local.path.startswith("/response/") and fake._response_fault():
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                    self._json(503, {"ok": False, "error": "service_unavailable"})
                    return
                super().do_POST()
        return H

    def _response_fault(self) -> bool:
        with self.lock:
            hit = self.rng.random() < self.response_fault_rate
            if hit:
                self.injected["response_url 503"] += 1
            return hit

    def _record(self, method, params):
        self._local.params = params
        if method == POST:
            with self.lock:
                self.attempts[_key(params)] += 1
        super()._record(method, params)
        if method == "response_url":
            req = self.by_response.get(self._local.path)
            if req is not None:
                self._answered(req, params, "response_url", "")

    def _fault(self, method):
        queued = super()._fault(method)
        if queued or method != POST:
            return queued
        p, key = self._local.params, _key(self._local.params)
        with self.lock:
            kill = self.kill
            if kill and self._local.auth.endswith(kill["token"]) and self.attempts[key] == 1 and p.get("blocks"):
                self.kill = None   # kill -9 the poster while its post is in flight; Slack took it or not
                os.kill(kill["proc"].pid, signal.SIGKILL)
                self.killed = {"at": time.monotonic(), "mode": kill["mode"], "key": key}
                return kill["mode"]
            if key and self.faulted[key] == 0 and self.rng.random() < self.fault_rate:
                self.faulted[key] += 1
                kind = self.rng.choice(POST_FAULTS)
                self.injected[kind] += 1
                return kind
        return ""

    def api_call(self, method, p):
        status, obj = super().api_call(method, p)
        if method == POST and obj.get("ok"):   # Slack took the post
            req = self.by_thread.get((p.get("channel"), p.get("thread_ts"))) if p.get("thread_ts") \
                else self.by_channel.get(p.get("channel"))
            if req is not None:
                self._answered(req, p, "post", _key(p))
        return status, obj

    def _answered(self, req: Req, p: dict, via: str, key: str) -> None:
        text = p.get("text") or ""
        with self.lock:
            if p.get("blocks") and not p.get("replace_original"):
                req.answers.append((time.monotonic(), via, key))
            elif "Busy" in text:
                req.busy = True
            else:
                req.other.append(text[:80])
        self.on_answer()


def _key(p: dict | None) -> str:
    meta = (p or {}).get("metadata")
    if isinstance(meta, str):
        try:
            meta = json.loads(meta)
        except ValueError:
            return ""
    return str(((meta or {}).get("event_payload") or {}).get("post_key", "")) if isinstance(meta, dict) else ""
