"""A minimal WebSocket server standing in for Slack's Socket Mode endpoint (plain ws:// on loopback): it sends
envelopes to the connected app and records the acknowledgements it sends back."""
from __future__ import annotations

import base64
import hashlib
import json
import socket
import struct
import threading

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class FakeSocketMode:
    def __init__(self):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.url = f"ws://127.0.0.1:{self.sock.getsockname()[1]}/link"
        self.conn: socket.socket | None = None
        self.received: list[dict] = []
        self.connected = threading.Event()
        self.cond = threading.Condition()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        try:
            conn, _ = self.sock.accept()
        except OSError:
            return
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(4096)
        key = next(line.split(b":", 1)[1].strip() for line in data.split(b"\r\n")
                   if line.lower().startswith(b"sec-websocket-key"))
        accept = base64.b64encode(hashlib.sha1(key + GUID.encode()).digest()).decode()
        conn.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Accept: {accept}\r\n\r\n").encode())
        self.conn = conn
        self.connected.set()
        self.send({"type": "hello", "num_connections": 1, "debug_info": {"host": "fake"}})
        buf = b""
        while True:
            try:
                chunk = conn.recv(65536)
            except OSError:
                return
            if not chunk:
                return
            buf += chunk
            while True:
                frame = _parse(buf)
                if frame is None:
                    break
                opcode, payload, used = frame
                buf = buf[used:]
                if opcode == 0x1:
                    with self.cond:
                        self.received.append(json.loads(payload))
                        self.cond.notify_all()
                elif opcode == 0x9:
                    self._frame(0xA, payload)
                elif opcode == 0x8:
                    return

    def _frame(self, opcode: int, payload: bytes) -> None:
        n = len(payload)
        head = bytes([0x80 | opcode]) + (bytes([n]) if n < 126 else
                                         bytes([126]) + struct.pack(">H", n) if n < 65536 else
                                         bytes([127]) + struct.pack(">Q", n))
        self.conn.sendall(head + payload)

    def send(self, obj: dict) -> None:
        self._frame(0x1, json.dumps(obj).encode())

    def wait_ack(self, envelope_id: str, timeout: float = 15.0) -> dict:
        with self.cond:
            ok = self.cond.wait_for(lambda: any(r.get("envelope_id") == envelope_id for r in self.received), timeout)
            assert ok, f"no ack for {envelope_id}: {self.received}"
            return next(r for r in self.received if r.get("envelope_id") == envelope_id)

    def close(self) -> None:
        for s in (self.conn, self.sock):
            try:
                if s:
                    s.close()
            except OSError:
                pass


def _parse(buf: bytes):
    if len(buf) < 2:
        return None
    opcode, n, pos = buf[0] & 0x0F, buf[1] & 0x7F, 2
    masked = buf[1] & 0x80
    if n == 126:
        if len(buf) < 4:
            return None
        n, pos = struct.unpack(">H", buf[2:4])[0], 4
    elif n == 127:
        if len(buf) < 10:
            return None
        n, pos = struct.unpack(">Q", buf[2:10])[0], 10
    mask = b""
    if masked:
        mask, pos = buf[pos:pos + 4], pos + 4
    if len(buf) < pos + n:
        return None
    payload = buf[pos:pos + n]
    if masked:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return opcode, payload, pos + n
