"""What a user hands over, as Sources: paths and log directories, archive members, and several inputs read as one
log (one job's per-node files). core.ingest turns each Source's bytes into chunks."""
from __future__ import annotations

import io
import os
import zlib
from dataclasses import dataclass, field
from typing import BinaryIO, Callable, Iterable, Iterator

from core.ingest import Source, UnusableInput

MAX_MEMBERS = 64


def _peek(stream: BinaryIO, n: int) -> bytes:
    if hasattr(stream, "peek"):
        data = stream.peek(n)[:n]
        if len(data) >= min(n, 8):
            return data
    if stream.seekable():
        pos = stream.tell()
        data = stream.read(n)
        stream.seek(pos)
        return data
    return b""


def _is_tar(head: bytes) -> bool:
    if head[:2] == b"\x1f\x8b":
        try:
            head = zlib.decompressobj(wbits=47).decompress(head, 600)
        except zlib.error:
            return False
    return head[257:262] == b"ustar"


def expand(src: Source, notes: list[str] | None = None) -> Iterator[Source]:
    """A .zip, .tar or .tar.gz becomes one Source per member file (at most MAX_MEMBERS, sharing the size cap);
    anything else is yielded as it is. What the archive as a whole says (members skipped past the cap, a damaged
    end) is added to `notes` once every member has been read: no single member's answer can carry it."""
    head = _peek(src.stream, 1024)
    if head[:4] == b"PK\x03\x04":
        yield from _zip_members(src)
    elif _is_tar(head):
        yield from _tar_members(src)
    else:
        yield src
        return
    if notes is not None:
        notes.extend(f"{src.name}: {n}" for n in src.notes)


def _member_cap(src: Source, used: list[int]) -> int:
    return max(1, src.max_bytes - used[0])


def _zip_members(src: Source) -> Iterator[Source]:
    import zipfile
    stream = src.stream if src.stream.seekable() else io.BytesIO(src.stream.read(src.max_bytes))
    try:
        zf = zipfile.ZipFile(stream)
    except zipfile.BadZipFile:
        raise UnusableInput(f"{src.name}: not a valid zip archive") from None
    members = [i for i in zf.infolist() if not i.is_dir()]
    if len(members) > MAX_MEMBERS:
        src.notes.append(f"only the first {MAX_MEMBERS} of {len(members)} files were read")
    used = [0]
    for info in members[:MAX_MEMBERS]:
        if used[0] >= src.max_bytes:
            break
        member = Source(f"{src.name}:{info.filename}", zf.open(info), _member_cap(src, used))
        yield member
        used[0] += member.bytes_read


def _tar_members(src: Source) -> Iterator[Source]:
    import tarfile
    try:
        tf = tarfile.open(fileobj=src.stream, mode="r|*")
    except (tarfile.TarError, OSError):
        raise UnusableInput(f"{src.name}: not a valid tar archive") from None
    used, n = [0], 0
    try:
        for info in tf:
            if not info.isfile():
                continue
            n += 1
            if n > MAX_MEMBERS or used[0] >= src.max_bytes:
                src.notes.append(f"stopped after {MAX_MEMBERS} files or the size cap")
                break
            f = tf.extractfile(info)
            if f is None:
                continue
            member = Source(f"{src.name}:{info.name}", f, _member_cap(src, used))
            yield member
            used[0] += member.bytes_read
    except (tarfile.TarError, EOFError, zlib.error, OSError):
        src.notes.append("the archive ends early or is damaged")


LOG_SUFFIXES = (".log", ".out", ".err", ".txt", ".gz", ".tgz", ".tar", ".zip")
MAX_DIR_FILES = 4096


def log_paths(paths: list[str]) -> tuple[list[tuple[str, str]], list[str]]:
    """(path, name shown) for each input: a directory stands for the log files under it (by suffix, sorted,
    hidden ones skipped; named by their path inside it), e.g. a Slurm or torchrun log directory. A directory
    without any is kept as it is (opening it then says so). Also returns a note for a directory that was cut."""
    out: list[tuple[str, str]] = []
    notes: list[str] = []
    for path in paths:
        if path == "-" or not os.path.isdir(path):
            shown = path if path.startswith("/dev/") else os.path.basename(path.rstrip("/")) or path
            out.append((path, "stdin" if path == "-" else shown))
            continue
        named = sorted(os.path.join(d, f) for d, dirs, files in os.walk(path)
                       if not any(part.startswith(".") for part in os.path.relpath(d, path).split(os.sep)
                                  if part != ".")
                       for f in files if f.lower().endswith(LOG_SUFFIXES) and not f.startswith("."))
        found = [f for f in named if os.path.isfile(f)]   # a FIFO or device in a log folder would block the read
        notes += [f"{f}: skipped, not a regular file" for f in named if f not in found][:10]
        if not found:
            out.append((path, path))
            continue
        if len(found) > MAX_DIR_FILES:
            notes.append(f"{path}: read the first {MAX_DIR_FILES} of {len(found)} log files")
        out += [(f, os.path.relpath(f, path)) for f in found[:MAX_DIR_FILES]]
    return out, notes


def open_inputs(path: str, max_bytes: int, name: str | None = None,
                notes: list[str] | None = None) -> Iterator[Source]:
    """Every input in a path: the file itself, or each member of an archive (archive notes into `notes`)."""
    yield from expand(open_path(path, max_bytes, name), notes)


def open_path(path: str, max_bytes: int, name: str | None = None) -> Source:
    if path == "-":
        import sys
        stream = sys.stdin.buffer
        if stream.isatty():   # on a terminal Ctrl-D ends one read, not the stream: read it once, up to that Ctrl-D
            stream = io.BytesIO(stream.read(max_bytes + 1))
        return Source("stdin", stream, max_bytes)
    try:
        f = open(path, "rb")
    except IsADirectoryError:
        raise UnusableInput(f"{path}: a directory without log files ({', '.join(LOG_SUFFIXES)})") from None
    except OSError as e:
        raise UnusableInput(f"{path}: cannot read ({e.strerror})") from None
    return Source(name or path.rsplit("/", 1)[-1], f, max_bytes)


@dataclass
class Part:
    name: str
    first_line: int   # 1-based line number of its first line in the joined stream
    lines: int = 0


@dataclass
class Joined:
    """Several inputs read as one log (one job's per-node files): ranks and hosts are compared across all of them.
    `openers` are called in order, each giving the Sources of one path (a file, or an archive's members). Line
    numbers run on from one part to the next; `where(line)` gives back the file and its own line number. An
    unusable path or part is skipped with a note; if nothing at all could be read, the last reason is raised."""
    name: str
    openers: list[Callable[[], Iterable[Source]]]
    bytes_read: int = 0
    truncated: bool = False
    notes: list[str] = field(default_factory=list)
    parts: list[Part] = field(default_factory=list)
    line: int = 0   # lines handed out so far

    @staticmethod
    def title(names: list[str]) -> str:
        more = ", …" if len(names) > 3 else ""
        return names[0] if len(names) == 1 else f"{len(names)} inputs ({', '.join(names[:3])}{more})"

    def chunks(self) -> Iterator[bytes | int]:
        self.line, problem = 0, None
        for opener in self.openers:
            try:
                for src in opener():
                    problem = (yield from self._part(src)) or problem
            except UnusableInput as e:   # the path itself: cannot be opened, or a damaged archive
                problem = e
                self.notes.append(f"skipped {e}")
        if not self.parts:
            raise problem or UnusableInput(f"{self.name}: no input")

    def _part(self, src: Source) -> Iterator[bytes | int]:
        part, done, problem = Part(src.name, self.line + 1), self.bytes_read, None
        try:
            for chunk in _terminated(src.chunks()):
                n = chunk if isinstance(chunk, int) else chunk.count(b"\n")
                self.line += n
                part.lines += n
                self.bytes_read = done + src.bytes_read
                yield chunk
        except UnusableInput as e:
            problem = e
            self.notes.append(f"skipped {e}" if not part.lines else f"{src.name}: stopped early: {e}")
        if part.lines:
            self.bytes_read = done + src.bytes_read
            self.truncated |= src.truncated
            self.notes += [f"{src.name}: {n}" for n in src.notes]
            self.parts.append(part)
        return problem

    def where(self, line: int) -> str | None:
        for p in reversed(self.parts):
            if line >= p.first_line:
                return f"{p.name}:{line - p.first_line + 1}"
        return None


def _terminated(chunks: Iterator[bytes | int]) -> Iterator[bytes | int]:
    """The chunks of one part, its last line ended with a newline so it cannot run into the next part's first."""
    prev: bytes | None = None
    for chunk in chunks:
        if prev is not None:
            yield prev
            prev = None
        if isinstance(chunk, int):
            yield chunk
        else:
            prev = chunk
    if prev is not None:
        yield prev if prev.endswith(b"\n") else prev + b"\n"
