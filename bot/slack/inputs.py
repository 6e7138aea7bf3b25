"""Turn Slack messages and files into inputs for triage. Files are fetched only from Slack's own file host
(or the configured Slack API host), with the bot token, never following redirects, and capped in size. They are
streamed to disk one at a time (a Spool: a private temporary folder, removed when the thread is answered) within a
byte budget per thread, so a thread of large files never sits in memory."""
from __future__ import annotations

import os
import re
import shutil
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlparse

CHUNK = 1 << 20

TEXT_EXT = (".log", ".txt", ".out", ".err", ".gz", ".json", ".jsonl", ".csv",
            ".yaml", ".yml", ".sh", ".bash", ".sbatch", ".slurm")   # the last: configs, answered with a diff
_MENTION = re.compile(r"<@[A-Z0-9]+>")
_FENCE = re.compile(r"```")


@dataclass
class Input:
    name: str
    data: bytes
    note: str = ""
    maybe_chat: bool = False   # message text that does not look like a log: answered only when a diagnosis
    #                            finds something in it, and never joined into a "together" diagnosis
    path: str | None = None    # a downloaded file on disk (then `data` is empty): read as a stream

    @property
    def content(self) -> bytes | str:
        """What the service reads: the pasted bytes, or the downloaded file's path."""
        return self.path if self.path is not None else self.data

    def head(self, n: int) -> bytes:
        if self.path is None:
            return self.data[:n]
        with open(self.path, "rb") as f:
            return f.read(n)


class Spool:
    """One thread's downloads: a private folder (0700) and what is left of the thread's byte budget."""

    def __init__(self, budget: int) -> None:
        self.left = budget
        self.budget = budget
        self.dir = tempfile.mkdtemp(prefix=f"triage-thread-{os.getpid()}-")
        self.count = 0

    def new_path(self) -> str:
        self.count += 1
        return os.path.join(self.dir, f"file-{self.count}")

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "Spool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class DownloadRefused(Exception):
    pass


def message_text(text: str) -> str:
    """Pasted text as the user sees it: mentions and code fences removed, Slack's HTML escapes undone."""
    text = _MENTION.sub("", text or "")
    text = _FENCE.sub("\n", text)
    return text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").strip()


_TOGETHER = re.compile(r"(?i)\btogether\b|함께|같이|한꺼번에")


def wants_together(mention_text: str) -> bool:
    """`@triage together`: read every log in the thread as one job's log."""
    return bool(_TOGETHER.search(mention_text or ""))


def looks_like_log(text: str) -> bool:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return len(lines) >= 2 or len(text) > 200


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise DownloadRefused(f"refusing to follow a redirect to {urlparse(newurl).netloc}")


def allowed_file_hosts(api_base_url: str | None) -> set[str]:
    hosts = {"files.slack.com"}
    if api_base_url:
        hosts.add(urlparse(api_base_url).netloc)
    return hosts


def download(url: str, token: str, max_bytes: int, hosts: set[str], dest: str, timeout: float = 30) -> tuple[int, bool]:
    """Stream a Slack file into `dest` in 1 MiB chunks. Returns (bytes written, truncated at max_bytes)."""
    parsed = urlparse(url)
    if parsed.scheme not in ("https", "http") or parsed.netloc not in hosts:
        raise DownloadRefused(f"not a Slack file URL ({parsed.netloc or url[:40]})")
    if parsed.scheme == "http" and parsed.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise DownloadRefused("refusing to send the bot token over plain http")
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    opener = urllib.request.build_opener(_NoRedirect)
    written, cut = 0, False
    try:
        with opener.open(req, timeout=timeout) as resp, open(dest, "wb") as out:
            while True:
                block = resp.read(min(CHUNK, max_bytes + 1 - written))
                if not block:
                    break
                if written + len(block) > max_bytes:
                    block, cut = block[:max_bytes - written], True
                out.write(block)
                written += len(block)
                if cut:
                    break
    except urllib.error.URLError as e:
        raise DownloadRefused(f"download failed ({getattr(e, 'reason', e)})") from None
    except OSError as e:   # the spool's disk: full, or gone
        raise DownloadRefused(f"could not store the download ({e.strerror or type(e).__name__})") from None
    return written, cut


def message_inputs(msg: dict, token: str, max_bytes: int, hosts: set[str], label: str,
                   spool: Spool) -> tuple[list[Input], list[str]]:
    """The pasted log (if any) and every attached text/gzip file of one Slack message (downloaded into the spool,
    within its budget), plus notes on skips."""
    inputs: list[Input] = []
    notes: list[str] = []
    text = message_text(msg.get("text", ""))
    if text:
        inputs.append(Input(f"{label} (pasted text)", text.encode(), maybe_chat=not looks_like_log(text)))
    for f in msg.get("files", []) or []:
        name = f.get("name") or f.get("title") or "file"
        is_text = (f.get("mimetype", "").startswith("text/") or name.lower().endswith(TEXT_EXT)
                   or f.get("filetype") in ("text", "log", "gzip", "plain"))
        url = f.get("url_private_download") or f.get("url_private")
        if not is_text or not url:
            notes.append(f"skipped `{name}`: not a text or .gz log")
            continue
        if spool.left <= 0:
            notes.append(f"skipped `{name}`: this thread's files already used the {spool.budget >> 20} MiB "
                         "read per thread")
            continue
        cap = min(max_bytes, spool.left)
        if f.get("size") and int(f["size"]) > cap:
            notes.append(f"`{name}` is {int(f['size']) >> 20} MiB; only the first {cap >> 20} MiB were read")
        path = spool.new_path()
        try:
            size, cut = download(url, token, cap, hosts, path)
        except DownloadRefused as e:
            notes.append(f"skipped `{name}`: {e}")
            continue
        spool.left -= size
        inputs.append(Input(name, b"", "truncated at the size cap" if cut else "", path=path))
    return inputs, notes
