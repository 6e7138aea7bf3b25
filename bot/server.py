"""`triage serve`: Socket Mode when SLACK_APP_TOKEN is set, otherwise an HTTP server with Slack's events at
/slack/events (signature-checked by Bolt) and a health check at /healthz."""
from __future__ import annotations

import logging
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

from slack_bolt import App, BoltRequest

MAX_BODY = 2 << 20
log = logging.getLogger("triage.http")


def make_server(app: App, host: str, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

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
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._send(413, b"request too large")
                return
            body = self.rfile.read(length).decode("utf-8", errors="replace")
            req = BoltRequest(body=body, query=parsed.query, headers={k.lower(): [v] for k, v in self.headers.items()})
            resp = app.dispatch(req)
            payload = resp.body.encode() if isinstance(resp.body, str) else (resp.body or b"")
            self._send(resp.status, payload, resp.headers)

    server = _Server((host, port), Handler)
    server.daemon_threads = True
    return server


class _Server(ThreadingHTTPServer):
    request_queue_size = 1024  # the default backlog of 5 resets connections under a burst of Slack requests


def serve_http(app: App, host: str, port: int) -> None:
    server = make_server(app, host, port)
    log.info("listening on http://%s:%d/slack/events", host, server.server_address[1])
    try:
        server.serve_forever()
    finally:
        server.server_close()


def serve_socket(app: App, app_token: str) -> None:
    from slack_bolt.adapter.socket_mode import SocketModeHandler
    SocketModeHandler(app, app_token).start()

