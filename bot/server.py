"""`triage serve`: Socket Mode when SLACK_APP_TOKEN is set, otherwise an HTTP server with Slack's events at
/slack/events (signature-checked by Bolt) and a health check at /healthz."""
from __future__ import annotations

import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from slack_bolt import App, BoltRequest
from slack_sdk.signature import SignatureVerifier

MAX_BODY = 512 << 10   # Slack never sends more (a message holds 40k characters; longer pastes arrive as files)
READ_TIMEOUT = 10.0        # seconds a connection may sit idle or half-sent before it is closed
MAX_CONNECTIONS = 512      # connections served at once; more are closed at once instead of holding a thread each
log = logging.getLogger("triage.http")


def make_server(app: App, host: str, port: int, signing_secret: str | None = None) -> ThreadingHTTPServer:
    """The HTTP front of the bot. With `signing_secret` every POST's timestamp and signature are checked before its
    body is parsed (a forged or replayed request never reaches a JSON parser); Bolt checks them again."""
    verifier = SignatureVerifier(signing_secret) if signing_secret else None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = READ_TIMEOUT

        def log_message(self, fmt, *args):  # request lines only, never bodies
            log.debug("%s %s", self.command, self.path.split("?")[0])

        def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
            self.send_response(status)
            for k, v in (headers or {}).items():
                for item in (v if isinstance(v, list) else [v]):
                    self.send_header(k, item)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if urlparse(self.path).path == "/healthz":
                self._send(200, b'{"ok": true}', {"Content-Type": "application/json"})
            else:
                self._send(404, b"not found")

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
            try:
                req = BoltRequest(body=body.decode("utf-8", errors="replace"), query=parsed.query,
                                  headers={k.lower(): [v] for k, v in self.headers.items()})
            except (ValueError, TypeError, KeyError):
                self._send(400, b"malformed request body")
                return
            early = verifier is not None and req.body.get("type") == "event_callback"
            if early:   # Bolt answers an event with an empty 200 anyway: say it now, then let Bolt run it
                self._send(200, b"")
            try:
                resp = app.dispatch(req)
            except Exception as e:   # never a dropped connection: Slack retries a 500
                log.error("dispatch failed: %s", type(e).__name__)
                if not early:
                    self._send(500, b"internal error")
                return
            if not early:
                payload = resp.body.encode() if isinstance(resp.body, str) else (resp.body or b"")
                self._send(resp.status, payload, resp.headers)

    server = _Server((host, port), Handler)
    server.daemon_threads = True
    return server


def _read_body(handler) -> bytes | None:
    """The request body, or None after answering: a length that is missing, negative or over the cap, a
    chunked body, or a client that stops sending."""
    raw = handler.headers.get("Content-Length")
    if handler.headers.get("Transfer-Encoding") or raw is None or not raw.strip().isdigit():
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


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # the default backlog of 5 resets connections under a burst of Slack requests

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)

    def handle_error(self, request, client_address):
        """A client that vanished mid-request: one quiet log line, not a traceback on stderr."""
        import sys
        log.info("connection from %s ended early: %s", client_address[0], sys.exc_info()[0].__name__)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):   # full: close it now rather than start one more thread
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


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

