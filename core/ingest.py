"""Bytes in, newline-aligned chunks out: gzip, size caps, encoding checks. Never reads a whole file into memory."""
from __future__ import annotations

import codecs
import io
import os
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO, Iterator

CHUNK = 8 << 20
MAX_LINE_BYTES = 1 << 20  # a line longer than this is cut into pieces for scanning
SNIFF = 64 << 10


class UnusableInput(Exception):
    """Input that cannot be triaged; the message is the one line the user sees."""


class ReadError(UnusableInput):
    """The file itself failed (EIO, a vanished mount): not the log's fault, worth reporting as a failure."""


MAX_JSON_DEPTH = 64   # a JSON log line nesting deeper is read as text (json would recurse until it crashes)


@dataclass
class Source:
    name: str
    stream: BinaryIO
    max_bytes: int = 4 << 30
    bytes_read: int = 0  # bytes of (decompressed) text handed to the scanner
    truncated: bool = False
    notes: list[str] = field(default_factory=list)

    def chunks(self) -> Iterator[bytes | int]:
        """Newline-aligned byte chunks; an int stands for that many lines skipped (head-and-tail reading)."""
        raw = _Raw(self.stream, self)
        head = raw.peek(SNIFF)
        if not head:
            raise UnusableInput(f"{self.name}: input is empty")
        size = _size(self.stream)
        if head[:2] != b"\x1f\x8b" and head[:4] != b"PK\x03\x04" and size is not None and size > self.max_bytes:
            _check_text(head, self.name)
            yield from _drop_nul(self._head_and_tail(size), self)
            return
        blocks: Iterator[bytes] = raw.blocks()
        if head[:2] == b"\x1f\x8b":
            blocks = _gunzip(blocks, self)
            first = next(blocks, b"")
            head = first[:SNIFF]
            blocks = _prepend(first, blocks)
        elif head[:4] == b"PK\x03\x04":
            raise UnusableInput(f"{self.name}: a zip archive inside an archive; unpack it first")
        blocks, head = _decode_to_utf8(blocks, head)
        _check_text(head, self.name)
        key = _json_log_key(head)
        if key is None:
            yield from _dedent(_drop_nul(_align(_cap(blocks, self), self), self))
            return
        self.notes.append(f'read the "{key}" field of each JSON line (container or log-shipper format)')
        yield from _unwrap_json(_drop_nul(_align(_cap(blocks, self), self), self), key)


    def _head_and_tail(self, size: int) -> Iterator[bytes | int]:
        """A file over the size cap: read its first and last halves of the cap, count the lines in between."""
        f, half = self.stream, self.max_bytes // 2
        f.seek(0)
        self.bytes_read = 0   # the head is read in CHUNKs, never the whole half of the cap at once

        def head_blocks():
            left = half
            while left > 0 and (block := f.read(min(CHUNK, left))):
                left -= len(block)
                if left == 0:   # the head's last block ends on a line boundary when it has one
                    block = block[:block.rfind(b"\n") + 1] or block
                self.bytes_read += len(block)
                yield block
        yield from _align(head_blocks(), self)
        cut = self.bytes_read
        tail_start = max(cut, size - (self.max_bytes - half))
        f.seek(cut)
        skipped, pos = 0, cut
        while pos < tail_start:
            block = f.read(min(CHUNK, tail_start - pos))
            if not block:
                break
            skipped += block.count(b"\n")
            pos += len(block)
        rest = f.read(CHUNK)
        nl = rest.find(b"\n")
        if nl >= 0:  # start the tail on a line boundary
            skipped += 1
            rest = rest[nl + 1:]
        yield skipped
        self.truncated = True
        self.notes.append(f"read the first {cut >> 20} MiB and the last {(size - tail_start) >> 20} MiB of "
                          f"{size >> 20} MiB; {skipped} lines in between were skipped (size cap)")

        def tail_blocks():
            yield rest
            while block := f.read(CHUNK):
                yield block
        for chunk in _align(tail_blocks(), self):
            self.bytes_read += len(chunk)
            yield chunk


def _size(stream: BinaryIO) -> int | None:
    try:
        if stream.seekable():
            return os.fstat(stream.fileno()).st_size
    except (OSError, AttributeError, ValueError, io.UnsupportedOperation):
        pass
    return None


class _Raw:
    """The stream's bytes. A read that fails (EIO) before anything was read makes the input unusable (ReadError);
    one that fails later ends the input there, with a note, like a truncated file."""

    def __init__(self, stream: BinaryIO, src: Source):
        self.stream, self.src = stream, src
        self.buf = b""
        self.got = 0

    def _read(self, n: int) -> bytes:
        try:
            data = self.stream.read(n)
        except OSError as e:
            why = e.strerror or type(e).__name__
            if not self.got:
                raise ReadError(f"{self.src.name}: cannot read ({why})") from None
            self.src.truncated = True
            self.src.notes.append(f"{self.src.name}: read failed after {self.got} bytes ({why}); read up to there")
            return b""
        self.got += len(data or b"")
        return data

    def peek(self, n: int) -> bytes:
        while len(self.buf) < n:
            more = self._read(n - len(self.buf))
            if not more:
                break
            self.buf += more
        return self.buf[:n]

    def blocks(self) -> Iterator[bytes]:
        if self.buf:  # the peeked bytes go out with a full first block, so the first chunk is a fair sample
            first, self.buf = self.buf + self._read(CHUNK), b""
            yield first
        while block := self._read(CHUNK):
            yield block


def json_line(raw: bytes | str):
    """A JSON value from one log line, or None: not JSON, or nested deeper than MAX_JSON_DEPTH (read as text)."""
    import json
    b = raw if isinstance(raw, bytes) else raw.encode("utf-8", "replace")
    if b.count(b"[") + b.count(b"{") > MAX_JSON_DEPTH and _depth(b) > MAX_JSON_DEPTH:
        return None
    try:
        return json.loads(b)
    except (ValueError, RecursionError):
        return None


def _depth(raw: bytes) -> int:
    """How deep brackets nest in a JSON text, strings skipped."""
    import re
    depth = deepest = 0
    for m in re.finditer(rb'"(?:[^"\\]|\\.)*"|[\[{]|[\]}]', raw):
        c = m.group(0)
        depth += 1 if c in (b"[", b"{") else -1 if c in (b"]", b"}") else 0
        deepest = max(deepest, depth)
    return deepest


def _prepend(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


def _gunzip(blocks: Iterator[bytes], src: Source) -> Iterator[bytes]:
    d = zlib.decompressobj(wbits=47)
    produced = 0
    for block in blocks:
        data = block
        while data:
            try:
                out = d.decompress(data, CHUNK)
            except zlib.error:
                if produced == 0:
                    raise UnusableInput(f"{src.name}: not a valid gzip file") from None
                src.truncated = True
                src.notes.append("gzip stream is corrupt after this point")
                return
            produced += len(out)
            if out:
                yield out
            if produced > src.max_bytes:
                return  # the cap in _cap marks truncation
            data = d.unconsumed_tail
            if d.eof:
                rest = d.unused_data
                if rest[:2] == b"\x1f\x8b":  # concatenated gzip members
                    d = zlib.decompressobj(wbits=47)
                    data = rest
                else:
                    data = b""
    if not d.eof:
        if produced == 0:
            raise UnusableInput(f"{src.name}: gzip file is truncated before any data")
        src.truncated = True
        src.notes.append("gzip file ends early (truncated download?)")


def _utf16(head: bytes) -> tuple[str, bytes] | None:
    """UTF-16 by its NUL pattern (ASCII text has a NUL in every other byte), BOM or not; (encoding, BOM) or None.
    A file that merely starts with FF FE but has no such pattern is not UTF-16."""
    bom = next((b for b in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE) if head.startswith(b)), b"")
    body = head[len(bom):len(bom) + 4096]
    even, odd = body[0::2], body[1::2]
    if len(body) < 8:
        return None
    if odd.count(0) >= 0.6 * len(odd) and even.count(0) < 0.1 * len(even):
        return "utf-16-le", bom if bom == codecs.BOM_UTF16_LE else b""
    if even.count(0) >= 0.6 * len(even) and odd.count(0) < 0.1 * len(odd):
        return "utf-16-be", bom if bom == codecs.BOM_UTF16_BE else b""
    return None


def _decode_to_utf8(blocks: Iterator[bytes], head: bytes) -> tuple[Iterator[bytes], bytes]:
    found = _utf16(head)
    if found:
        enc, bom = found

        def transcode(blocks=blocks, enc=enc, bom=bom):
            dec = codecs.getincrementaldecoder(enc)(errors="replace")
            first = True
            for b in blocks:
                if first:
                    b, first = b[len(bom):], False
                yield dec.decode(b).encode("utf-8")
            yield dec.decode(b"", final=True).encode("utf-8")
        it = transcode()
        first = next(it, b"")
        return _prepend(first, it), first[:SNIFF]
    if head.startswith(codecs.BOM_UTF8):
        return blocks, head[3:]
    return blocks, head


def _check_text(head: bytes, name: str) -> None:
    if not head.strip():
        raise UnusableInput(f"{name}: input is empty (only whitespace)")
    if b"\x00" in head:
        raise UnusableInput(f"{name}: looks like a binary file (NUL bytes), not a text log")
    text = head.decode("utf-8", errors="replace")
    bad = text.count("\ufffd")
    controls = sum(1 for c in text if ord(c) < 32 and c not in "\t\n\r\x1b\x0c\x08")
    if (bad + controls) > max(8, len(text) // 20):
        raise UnusableInput(f"{name}: not a text log (mostly invalid UTF-8 or control bytes)")


# Where the text of a log line sits when every line is a JSON object: docker json-file ("log"), Fluent Bit /
# CloudWatch / Loki exports ("message", "msg", "@message"), journald JSON ("MESSAGE"), GCP ("textPayload").
JSON_LOG_KEYS = ("log", "message", "msg", "@message", "MESSAGE", "textPayload")


def _json_log_key(head: bytes) -> str | None:
    """The key holding the text when the input's first lines are all JSON objects sharing one of JSON_LOG_KEYS."""
    lines = [ln for ln in head.split(b"\n")[:-1] if ln.strip()][:5]   # complete lines only
    if not lines or not all(ln.lstrip().startswith(b"{") for ln in lines):
        return None
    keys: set[str] | None = None
    for ln in lines:
        obj = json_line(ln)
        if not isinstance(obj, dict):
            return None
        found = {k for k in JSON_LOG_KEYS if isinstance(obj.get(k), str)}
        keys = found if keys is None else keys & found
    return next((k for k in JSON_LOG_KEYS if keys and k in keys), None)


def _unwrap_json(chunks: Iterator[bytes], key: str) -> Iterator[bytes]:
    """Each JSON line becomes the text under `key`, one line for one line, so line numbers still match the file;
    a line that is not such an object is kept as it is."""
    for chunk in chunks:
        out = []
        for line in chunk.split(b"\n"):
            if line.startswith(b"{"):
                obj = json_line(line)
                if isinstance(obj, dict) and isinstance(obj.get(key), str):
                    line = obj[key].rstrip("\r\n").replace("\r", "").replace("\n", " ").encode("utf-8", "replace")
            out.append(line)
        yield b"\n".join(out)


def _drop_nul(chunks: Iterator, src: Source) -> Iterator:
    """NUL bytes past the head are a hole in the file (a node that crashed with the log's last block allocated but
    unwritten, a preallocated file): dropped, so the line after the hole reads as its text, not as NUL escapes.
    Line numbers do not change (no newline is added or removed); a note says how many were dropped."""
    dropped = 0
    for chunk in chunks:
        if isinstance(chunk, bytes) and b"\x00" in chunk:
            before = len(chunk)
            chunk = chunk.replace(b"\x00", b"")
            dropped += before - len(chunk)
        yield chunk
    if dropped:
        src.notes.append(f"{src.name}: dropped {dropped} NUL bytes (a hole in the file, e.g. after a node crash)")


def _cap(blocks: Iterator[bytes], src: Source) -> Iterator[bytes]:
    for b in blocks:
        room = src.max_bytes - src.bytes_read
        if len(b) > room:
            b = b[:room]
            src.truncated = True
            src.notes.append(f"only the first {src.max_bytes >> 20} MiB were read (size cap)")
        src.bytes_read += len(b)
        if b:
            yield b
        if src.truncated:
            return


def _align(blocks: Iterator[bytes], src: Source) -> Iterator[bytes]:
    """Re-cut blocks so that every chunk ends with a newline (except possibly the last)."""
    carry = b""   # the start of a line the last block cut (never holds a newline)
    for b in blocks:
        cut = b.rfind(b"\n")
        if cut < 0:
            data = carry + b
            if len(data) > MAX_LINE_BYTES:  # a giant line: scan it in pieces, line numbers stay right
                yield data
                carry = b""
            else:
                carry = data
            continue
        # one copy of the block at most (a memoryview slice is not copied before the concatenation)
        yield carry + memoryview(b)[: cut + 1] if carry else b if cut + 1 == len(b) else b[: cut + 1]
        carry = b[cut + 1:]
    if carry:
        yield carry


DEDENT_MAX = 1 << 20  # a text this small is a paste: its common indentation is the paste's, not the program's


def _dedent(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """A pasted log indented as a whole (a Markdown list item, an e-mail or a code block inside a quote) loses
    the indentation every line shares, so readers see each line as the program printed it. Only a text that
    fits one chunk is looked at; a program's own indentation (a traceback's '  File', a table's columns)
    stays, since it is never on every line."""
    first = next(chunks, None)
    if first is None:
        return
    second = next(chunks, None)
    if second is not None or len(first) > DEDENT_MAX:
        yield first
        if second is not None:
            yield second
        yield from chunks
        return
    lines = first.split(b"\n")
    filled = [ln for ln in lines if ln.strip()]
    common = _common_indent(filled)
    if not common:
        yield first
        return
    n = len(common)
    yield b"\n".join(ln[n:] if ln.startswith(common) else ln.lstrip(b" \t") for ln in lines)


def _common_indent(lines: list[bytes]) -> bytes:
    if not lines:
        return b""
    common = None
    for ln in lines:
        lead = ln[: len(ln) - len(ln.lstrip(b" \t"))]
        common = lead if common is None else _shared_start(common, lead)
        if not common:
            return b""
    return common or b""


def _shared_start(a: bytes, b: bytes) -> bytes:
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        i += 1
    return a[:i]


def from_bytes(data: bytes, name: str = "paste", max_bytes: int = 4 << 30) -> Source:
    return Source(name, io.BytesIO(data), max_bytes)
