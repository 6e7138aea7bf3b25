"""Slow-loris on `triage serve`, with real sockets on loopback: a request has one deadline for its request line,
headers and body together (a byte now and then does not keep it alive), and connections still sending a request
cannot fill the connection cap so that a whole, signed request from Slack is refused."""
import socket
import threading
import time
from urllib.parse import urlparse

import pytest

from conftest import FIXTURES

XID = (FIXTURES / "gpu_xid" / "xid79.log").read_text()


def _addr(h):
    u = urlparse(h.url)
    return u.hostname, u.port


def _trickle(sock, data: bytes, every: float, stop: threading.Event) -> None:
    for b in data:
        if stop.wait(every):
            return
        try:
            sock.sendall(bytes([b]))
        except OSError:
            return


def _closed_after(sock, limit: float) -> float | None:
    """Seconds until the server closed the connection (or answered), None when it was still open after `limit`."""
    t0 = time.monotonic()
    sock.settimeout(0.2)
    while time.monotonic() - t0 < limit:
        try:
            got = sock.recv(4096)
        except socket.timeout:
            continue
        except OSError:
            return time.monotonic() - t0
        if got == b"" or got.startswith(b"HTTP/1.1 4"):
            return time.monotonic() - t0
    return None


@pytest.mark.parametrize("part", ["headers", "body"])
def test_a_trickled_request_is_cut_at_its_deadline_whatever_each_byte_does(slack_bot, monkeypatch, part):
    monkeypatch.setattr("bot.slack.server.READ_TIMEOUT", 1.0)
    h = slack_bot()
    head = b"POST /slack/events HTTP/1.1\r\nHost: x\r\n"
    if part == "headers":
        start, rest = head, b"X-Padding: " + b"a" * 200 + b"\r\n\r\n"
    else:
        start, rest = head + b"Content-Type: application/json\r\nContent-Length: 300\r\n\r\n", b"{" + b"a" * 299
    stop = threading.Event()
    with socket.create_connection(_addr(h), timeout=5) as s:
        s.sendall(start)
        threading.Thread(target=_trickle, args=(s, rest, 0.25, stop), daemon=True).start()
        took = _closed_after(s, 8.0)
        stop.set()
    assert took is not None and took < 3.0, f"a request trickling a byte every 0.25 s was kept open ({took})"


def test_half_sent_requests_cannot_fill_the_cap_so_slack_is_refused(slack_bot, monkeypatch):
    monkeypatch.setattr("bot.slack.server.READ_TIMEOUT", 60.0)   # they would hold their places for a minute
    monkeypatch.setattr("bot.slack.server.MAX_CONNECTIONS", 4)
    h = slack_bot()
    loris = []
    for _ in range(12):                      # three times the cap, each a request that never finishes
        s = socket.create_connection(_addr(h), timeout=5)
        s.sendall(b"POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Length: 500\r\n\r\n{")
        loris.append(s)
    time.sleep(0.3)
    try:
        t0 = time.monotonic()
        status, body, _ = h.slash(XID, user="U3")    # a whole, signed request still gets its answer
        assert status == 200 and "Diagnosing" in body.decode() and time.monotonic() - t0 < 5
        import urllib.request
        with urllib.request.urlopen(h.url + "/healthz", timeout=5) as r:
            assert r.status == 200
        assert threading.active_count() < 60    # the dropped half-requests do not keep a thread each
    finally:
        for s in loris:
            s.close()
