"""`triage serve`: Socket Mode when SLACK_APP_TOKEN is set, otherwise an HTTP server with Slack's events at
/slack/events (signature-checked by Bolt) and a health check at /healthz."""
from __future__ import annotations

import functools
import io
import itertools
import logging
import socket
import threading
import time
from collections import OrderedDict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from slack_bolt import App, BoltRequest
from slack_sdk.signature import SignatureVerifier

from core.redact import mask_secrets

MAX_BODY = 512 << 10   # Slack never sends more (a message holds 40k characters; longer pastes arrive as files)
READ_TIMEOUT = 10.0        # seconds one request may take to arrive, request line, headers and body together
MAX_CONNECTIONS = 512      # connections served at once; past that the oldest one still sending its request goes
WRITE_TIMEOUT = 10.0       # seconds a client may take to read the answer
log = logging.getLogger("triage.http")
_SEQ = itertools.count(1)


def _logged(fn):
    """One log line per request, however it ends: its id, kind, status (- when the connection dropped) and ms,
    masked for secrets."""
    @functools.wraps(fn)
    def run(self):
        self.status, self.kind, self.rid, t0 = None, word(self.command).lower(), "", time.monotonic()
        try:
            fn(self)
        finally:
            ms = round((time.monotonic() - t0) * 1000)
            log.info(mask_secrets(f"request id={self.rid or 'r%d' % next(_SEQ)} kind={self.kind} "
                                  f"status={self.status or '-'} ms={ms}"))
    return run


def word(x) -> str:
    """What came from a client, as one short token for a log line (no spaces, no control characters)."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "/_.-") else "?" for c in str(x or "-"))[:60]


def describe(body: dict) -> tuple[str, str]:
    """(kind, id) of a Slack request for the log: the event's type and id, the command, the action or shortcut."""
    kind = body.get("type") or ("command" if body.get("command") else "unknown")
    if kind == "event_callback":
        return f"event:{word((body.get('event') or {}).get('type'))}", word(body.get("event_id"))
    if kind == "command":
        return f"command:{word(body.get('command'))}", word(body.get("trigger_id"))
    actions = body.get("actions") or [{}]
    what = body.get("callback_id") or (body.get("view") or {}).get("callback_id") or actions[0].get("action_id")
    return f"{word(kind)}:{word(what)}", word(body.get("trigger_id") or "")


def make_server(app: App, host: str, port: int, signing_secret: str | None = None) -> ThreadingHTTPServer:
    """The HTTP front of the bot. With `signing_secret` every POST's timestamp and signature are checked before its
    body is parsed (a forged or replayed request never reaches a JSON parser); Bolt checks them again."""
    verifier = SignatureVerifier(signing_secret) if signing_secret else None

    class Handler(_Deadline, BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = deadline_s = READ_TIMEOUT

        def log_message(self, fmt, *args):  # request lines only, never bodies
            log.debug("%s %s", self.command, self.path.split("?")[0])

        def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
            self.status = status
            self.send_response(status)
            for k, v in (headers or {}).items():
                for item in (v if isinstance(v, list) else [v]):
                    self.send_header(k, item)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        @_logged
        def do_GET(self):
            self.kind = "get:" + word(urlparse(self.path).path)
            self.arrived()
            if urlparse(self.path).path == "/healthz":
                self._send(200, b'{"ok": true}', {"Content-Type": "application/json"})
            else:
                self._send(404, b"not found")

        @_logged
        def do_POST(self):
            parsed = urlparse(self.path)
            if parsed.path != "/slack/events":
                self._send(404, b"not found")
                return
            body = _read_body(self)
            if body is None:
                return
            if verifier is not None and not _signed(verifier, body, self.headers):
                self._send(401, b"invalid request signature")
                return
            self.arrived()
            try:
                req = BoltRequest(body=body.decode("utf-8", errors="replace"), query=parsed.query,
                                  headers={k.lower(): [v] for k, v in self.headers.items()})
            except (ValueError, TypeError, KeyError, AttributeError):   # Bolt reads a JSON body as an object
                self._send(400, b"malformed request body")
                return
            if not isinstance(req.body, dict):   # signed but not an object ([1], "x", null): Slack never sends one
                self._send(400, b"malformed request body")
                return
            self.kind, self.rid = describe(req.body)
            # An event is acked once Bolt's middleware has written it down (SlackBot.dedupe; its listener runs after
            # the ack): acked before that, a process killed in between loses it, as Slack never resends it.
            try:
                resp = app.dispatch(req)
            except Exception as e:   # never a dropped connection: Slack retries a 500
                log.error("dispatch failed: %s", type(e).__name__)
                self._send(500, b"internal error")
                return
            payload = resp.body.encode() if isinstance(resp.body, str) else (resp.body or b"")
            self._send(resp.status, payload, resp.headers)

    server = _Server((host, port), Handler)
    server.daemon_threads = True
    return server


def _read_body(handler) -> bytes | None:
    """The request body, or None after answering: a length that is missing, negative, not ASCII digits ('²' is a
    digit to str.isdigit) or over the cap, a chunked body, or a client that stops sending."""
    raw = handler.headers.get("Content-Length")
    digits = (raw or "").strip()
    if handler.headers.get("Transfer-Encoding") or raw is None or not (digits.isascii() and digits.isdigit()):
        handler.close_connection = True
        handler._send(411 if raw is None else 400, b"a Content-Length is required")
        return None
    length = int(raw)
    if length > MAX_BODY:
        handler.close_connection = True
        handler._send(413, b"request too large")
        return None
    try:
        body = handler.rfile.read(length)
    except (TimeoutError, OSError):
        handler.close_connection = True
        return None
    if len(body) < length:
        handler.close_connection = True
        return None
    return body


def _signed(verifier: SignatureVerifier, body: bytes, headers) -> bool:
    """A numeric timestamp within five minutes and a matching signature (a non-number is a bad request, not a 500)."""
    ts = headers.get("X-Slack-Request-Timestamp") or ""
    if not ts.strip().isdigit():
        return False
    try:
        return verifier.is_valid(body, ts.strip(), headers.get("X-Slack-Signature"))
    except (ValueError, TypeError):
        return False


class _Deadline:
    """Request handling with one deadline per request (see _DeadlineReader) and a place in the server's cap that
    is only kept once the request has arrived."""
    deadline_s = READ_TIMEOUT

    def setup(self):
        super().setup()
        self.deadline = time.monotonic() + self.deadline_s
        self.rfile = io.BufferedReader(_DeadlineReader(self))

    def handle_one_request(self):
        """Each request (a kept-alive connection's next one too) has READ_TIMEOUT in all to arrive, however
        slowly it trickles in, and may be dropped for a newcomer until it has (see _Server)."""
        self.deadline = time.monotonic() + self.deadline_s
        self.server.reading(self.connection)
        super().handle_one_request()

    def arrived(self) -> None:
        """The request is complete (and signed, for a POST): from now on it holds its place."""
        self.server.working(self.connection)
        self.connection.settimeout(WRITE_TIMEOUT)


class _DeadlineReader(io.RawIOBase):
    """The connection's bytes, each recv given only what is left of the request's deadline: a client sending one
    byte every few seconds is cut off when the deadline passes, not kept alive by each byte."""

    def __init__(self, handler):
        self.handler, self.sock = handler, handler.connection

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        left = self.handler.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request not received in time")
        self.sock.settimeout(left)
        return self.sock.recv_into(buf)


class _Server(ThreadingHTTPServer):
    """At most MAX_CONNECTIONS connections hold a thread. A full server does not refuse a newcomer while some
    connection is still sending its request (unauthenticated, maybe a slow-loris): the oldest such one is closed
    to make room. Only requests that arrived whole (and signed) keep their place, so half-sent requests can
    never lock Slack out."""
    request_queue_size = 1024  # the default backlog of 5 resets connections under a burst of Slack requests

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.max_connections = MAX_CONNECTIONS
        self._lock = threading.Lock()
        self._active: set = set()
        self._reading: OrderedDict = OrderedDict()   # connections still receiving a request, oldest first

    def handle_error(self, request, client_address):
        """A client that vanished mid-request: one quiet log line, not a traceback on stderr."""
        import sys
        log.info("connection from %s ended early: %s", client_address[0], sys.exc_info()[0].__name__)

    def reading(self, conn) -> None:
        with self._lock:
            if conn in self._active:
                self._reading[conn] = True

    def working(self, conn) -> None:
        with self._lock:
            self._reading.pop(conn, None)

    def process_request(self, request, client_address):
        with self._lock:
            if len(self._active) >= self.max_connections:
                if not self._reading:   # every place is held by a request being answered: close this one now
                    self.shutdown_request(request)
                    return
                victim, _ = self._reading.popitem(last=False)
                try:
                    victim.shutdown(socket.SHUT_RDWR)   # its thread reads EOF and ends
                except OSError:
                    pass
            self._active.add(request)
            self._reading[request] = True
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._lock:
                self._active.discard(request)
                self._reading.pop(request, None)


def serve_http(app: App, host: str, port: int, signing_secret: str | None = None) -> None:
    server = make_server(app, host, port, signing_secret)
    log.info("listening on http://%s:%d/slack/events", host, server.server_address[1])
    try:
        server.serve_forever()
    finally:
        server.server_close()


def serve_socket(app: App, app_token: str) -> None:
    from slack_bolt.adapter.socket_mode import SocketModeHandler
    SocketModeHandler(app, app_token).start()

