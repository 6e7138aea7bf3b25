"""A local fake of the Slack Web API over real HTTP, for tests and for trying `triage serve` without Slack.

    python testkit/fakeslack.py serve --port 9000          # fake Slack API at http://127.0.0.1:9000/api/
    python testkit/fakeslack.py slash --bot http://127.0.0.1:3000 --secret S --api http://127.0.0.1:9000 FILE

It records every call, serves thread replies and files you register, accepts file uploads, and receives
answers posted to a slash command's response_url."""
from __future__ import annotations

import argparse
import hashlib
import hmac
import itertools
import json
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import parse_qs, urlencode, urlparse


class FakeSlack:
    def __init__(self, host: str = "127.0.0.1", port: int = 0, verbose: bool = False):
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.responses: list[dict[str, Any]] = []   # bodies posted to response_url
        self.uploads: dict[str, bytes] = {}
        self.threads: dict[tuple[str, str], list[dict]] = {}
        self.posted: list[dict[str, Any]] = []   # every chat.postMessage, as Slack would keep it
        self.files: dict[str, bytes] = {}
        self.file_auth: list[str] = []
        self.fail: dict[str, tuple[int, dict]] = {}  # method -> (http status, json)
        # method -> faults for its next calls, one per call: "503" (or any 5xx status) or "drop" (the connection
        # closes with no reply), each "…-after" (Slack did the work, then the reply was lost) or "…-before" (nothing
        # was done); "429": rate limited (nothing done, a Retry-After header)
        self.faults: dict[str, list[str]] = {}
        self.memberships: dict[str, list[str]] = {}  # user -> channel ids (users.conversations)
        self.users: dict[str, dict] = {}
        self.socket_url = ""  # what apps.connections.open hands out (a testkit/fakesocket.py server)
        self.verbose = verbose
        self.cond = threading.Condition()
        self._ts = 1700000000
        self.server = ThreadingHTTPServer((host, port), self._handler(), bind_and_activate=False)
        self.server.request_queue_size = 1024
        self.server.server_bind()
        self.server.server_activate()
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}"
        self.api = self.url + "/api/"
        self._thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def start(self) -> "FakeSlack":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    # ---- test helpers -----------------------------------------------------------------------------------
    def add_file(self, name: str, data: bytes) -> str:
        self.files[name] = data
        return f"{self.url}/files/{name}"

    def response_url(self, n: int = 1) -> str:
        return f"{self.url}/response/{n}"

    def called(self, method: str) -> list[dict[str, Any]]:
        with self.cond:
            return [p for m, p in self.calls if m == method]

    def wait(self, pred: Callable[[], Any], timeout: float = 15.0) -> Any:
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                got = pred()
                if got:
                    return got
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"timed out; calls so far: {[m for m, _ in self.calls]}")
                self.cond.wait(left)

    def wait_calls(self, method: str, n: int = 1, timeout: float = 15.0) -> list[dict[str, Any]]:
        return self.wait(lambda: len(self.called(method)) >= n and self.called(method), timeout)

    # ---- the API ----------------------------------------------------------------------------------------
    def _next_ts(self) -> str:
        with self.cond:   # two posts at the same moment never get one ts
            self._ts += 1
            return f"{self._ts}.000100"

    def api_call(self, method: str, p: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if method in self.fail:
            return self.fail[method]
        if method == "apps.connections.open":
            return 200, {"ok": True, "url": self.socket_url}
        if method == "auth.test":
            return 200, {"ok": True, "url": "https://fake.slack.com/", "team": "T", "user": "triage",
                         "team_id": "T1", "user_id": "UBOT", "bot_id": "BBOT"}
        if method in ("chat.postMessage", "chat.update", "chat.postEphemeral"):
            ts = p.get("ts") or self._next_ts()
            if method == "chat.postMessage":   # kept, so conversations.history/replies show what the bot posted
                meta = p.get("metadata")
                self.posted.append({"channel": p.get("channel"), "ts": ts, "thread_ts": p.get("thread_ts"),
                                    "text": p.get("text"), "bot_id": "BBOT",
                                    "metadata": json.loads(meta) if isinstance(meta, str) else meta})
            return 200, {"ok": True, "channel": p.get("channel"), "ts": ts, "message_ts": self._next_ts()}
        if method == "conversations.history":
            return 200, {"ok": True, "has_more": False, "messages": [
                m for m in reversed(self.posted) if m["channel"] == p.get("channel") and not m["thread_ts"]]}
        if method == "conversations.replies":
            mine = [m for m in self.posted if m["channel"] == p.get("channel") and m["thread_ts"] == p.get("ts")]
            return 200, {"ok": True, "messages": self.threads.get((p.get("channel"), p.get("ts")), []) + mine,
                         "has_more": False}
        if method == "users.conversations":
            return 200, {"ok": True, "channels": [{"id": c} for c in self.memberships.get(p.get("user"), [])]}
        if method == "users.info":
            user = self.users.get(p.get("user"), {"id": p.get("user"), "locale": "en-US"})
            return 200, {"ok": True, "user": user}
        if method == "files.getUploadURLExternal":
            fid = f"F{len(self.uploads) + 1}"
            self.uploads[fid] = b""
            return 200, {"ok": True, "upload_url": f"{self.url}/upload/{fid}", "file_id": fid}
        if method == "files.completeUploadExternal":
            files = p.get("files")
            files = json.loads(files) if isinstance(files, str) else files
            return 200, {"ok": True, "files": [{"id": f["id"], "title": f.get("title", "")} for f in files]}
        return 200, {"ok": True}

    def _fault(self, method: str) -> str:
        with self.cond:
            queue = self.faults.get(method)
            return queue.pop(0) if queue else ""

    def _record(self, method: str, params: dict[str, Any]) -> None:
        with self.cond:
            self.calls.append((method, params))
            self.cond.notify_all()
        if self.verbose:
            shown = {k: v for k, v in params.items() if k not in ("blocks", "token")}
            print(f"[fake slack] {method} {json.dumps(shown)[:300]}", file=sys.stderr)
            for b in params.get("blocks") or []:
                t = (b.get("text") or {}).get("text") if isinstance(b, dict) else None
                if t:
                    print("    " + t.replace("\n", "\n    ")[:1500], file=sys.stderr)

    def _handler(self):
        fake = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _json(self, status: int, obj: dict, headers: dict[str, str] | None = None) -> None:
                body = json.dumps(obj).encode()
                self.send_response(status)
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                path = urlparse(self.path).path
                if path.startswith("/files/") and path[7:] in fake.files:
                    fake.file_auth.append(self.headers.get("Authorization", ""))
                    data = fake.files[path[7:]]
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self._json(404, {"ok": False, "error": "not_found"})

            def do_POST(self):
                path = urlparse(self.path).path
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if path.startswith("/upload/"):
                    fake.uploads[path[8:]] = raw
                    fake._record("upload", {"file_id": path[8:], "bytes": len(raw)})
                    self._json(200, {"ok": True})
                    return
                params = _parse(raw, self.headers.get("Content-Type", ""))
                if path.startswith("/response/"):
                    with fake.cond:
                        fake.responses.append(params)
                    fake._record("response_url", params)
                    self._json(200, {"ok": True})
                    return
                if path.startswith("/api/"):
                    method = path[5:]
                    fake._record(method, params)
                    fault = fake._fault(method)
                    if fault == "429":
                        fault = "429-before"
                    if not fault.endswith("-before"):
                        status, obj = fake.api_call(method, params)
                    if fault.startswith("drop"):
                        self.close_connection = True   # the work is done (or not): no reply at all
                        return
                    code = fault.split("-")[0]
                    if code.isdigit():
                        status = int(code)
                        obj = {"ok": False, "error": "ratelimited" if status == 429 else "service_unavailable"}
                    self._json(status, obj, {"Retry-After": "1"} if status == 429 else None)
                    return
                self._json(404, {"ok": False, "error": "unknown_path"})

        return H


def _parse(raw: bytes, ctype: str) -> dict[str, Any]:
    text = raw.decode("utf-8", errors="replace")
    if "json" in ctype:
        try:
            return json.loads(text or "{}")
        except json.JSONDecodeError:
            return {"_raw": text}
    params: dict[str, Any] = {k: v[0] for k, v in parse_qs(text).items()}
    for k in ("blocks", "view", "files"):
        if isinstance(params.get(k), str) and params[k][:1] in "[{":
            params[k] = json.loads(params[k])
    return params


def signed_headers(secret: str, body: str, ts: int | None = None) -> dict[str, str]:
    ts = int(time.time()) if ts is None else ts
    base = f"v0:{ts}:{body}".encode()
    sig = "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(ts), "X-Slack-Signature": sig}


def post_signed(url: str, secret: str, body: str, content_type: str, extra: dict[str, str] | None = None,
                ts: int | None = None) -> tuple[int, bytes, float]:
    headers = {"Content-Type": content_type, **signed_headers(secret, body, ts), **(extra or {})}
    req = urllib.request.Request(url, data=body.encode(), headers=headers, method="POST")
    t0 = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read(), time.monotonic() - t0
    except urllib.error.HTTPError as e:
        return e.code, e.read(), time.monotonic() - t0


_TRIGGERS = itertools.count(1)


def slash_body(text: str, response_url: str, channel: str = "C1", user: str = "U1") -> str:
    return urlencode({"token": "x", "team_id": "T1", "team_domain": "t", "channel_id": channel, "channel_name": "ml",
                      "user_id": user, "user_name": "alice", "command": "/diagnose", "text": text,
                      "response_url": response_url, "trigger_id": f"{time.time_ns()}.{next(_TRIGGERS)}",
                      "api_app_id": "A1"})


def event_body(event: dict, event_id: str = "Ev1") -> str:
    return json.dumps({"token": "x", "team_id": "T1", "api_app_id": "A1", "type": "event_callback",
                       "event_id": event_id, "event_time": int(time.time()), "event": event,
                       "authorizations": [{"team_id": "T1", "user_id": "UBOT", "is_bot": True}]})


def interactive_body(payload: dict) -> str:
    return urlencode({"payload": json.dumps(payload)})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, default=9000)
    c = sub.add_parser("slash", help="send a signed /diagnose with FILE's text to the bot")
    c.add_argument("--bot", default="http://127.0.0.1:3000")
    c.add_argument("--secret", required=True)
    c.add_argument("--api", default="http://127.0.0.1:9000", help="the fake Slack (for the response_url)")
    c.add_argument("file")
    a = ap.parse_args(argv)
    if a.cmd == "serve":
        fake = FakeSlack(port=a.port, verbose=True)
        print(f"fake Slack API at {fake.api}", file=sys.stderr)
        fake.server.serve_forever()
        return 0
    text = open(a.file, encoding="utf-8", errors="replace").read()[:4000]
    status, body, took = post_signed(a.bot.rstrip("/") + "/slack/events", a.secret,
                                     slash_body(text, a.api.rstrip("/") + "/response/1"),
                                     "application/x-www-form-urlencoded")
    print(f"bot answered {status} in {took * 1000:.0f} ms: {body.decode()[:200]}")
    return 0 if status == 200 else 1


if __name__ == "__main__":
    sys.exit(main())
