"""A signed body that is not a JSON object, or a Content-Length that is not ASCII digits, gets a 400 (issue 31,
item 22), never a dropped connection with no status."""
import pytest

from conftest import SECRET
from testkit.fakeslack import signed_headers


def _raw(url: str, data: bytes) -> bytes:
    import socket
    from urllib.parse import urlparse
    u = urlparse(url)
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        s.sendall(data)
        out = b""
        try:
            while chunk := s.recv(65536):
                out += chunk
                if b"\r\n\r\n" in out:
                    break
        except OSError:
            pass
        return out


def _request(body: bytes, headers: dict[str, str]) -> bytes:
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    return f"POST /slack/events HTTP/1.1\r\nHost: x\r\n{head}\r\n".encode("utf-8") + body


@pytest.mark.parametrize("body", ["[1]", '"x"', "null", "42", "true", "[]"])
def test_a_signed_json_body_that_is_not_an_object_is_a_400(slack_bot, body):
    h = slack_bot()
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body)),
               **signed_headers(SECRET, body)}
    reply = _raw(h.url, _request(body.encode(), headers))
    assert reply.startswith(b"HTTP/1.1 400"), reply[:60]


@pytest.mark.parametrize("length", ["²", "١٢", "3²"])
def test_a_content_length_that_is_not_ascii_digits_is_a_400(slack_bot, length):
    h = slack_bot()
    reply = _raw(h.url, _request(b"{}", {"Content-Type": "application/json", "Content-Length": length}))
    assert reply.startswith(b"HTTP/1.1 400"), reply[:60]


def test_a_signed_object_body_is_still_served(slack_bot):
    h = slack_bot()
    body = '{"type": "url_verification", "challenge": "abc"}'
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body)), **signed_headers(SECRET, body)}
    reply = _raw(h.url, _request(body.encode(), headers))
    assert reply.startswith(b"HTTP/1.1 200")
