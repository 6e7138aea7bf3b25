"""Turn Slack messages and files into inputs for triage. Files are fetched only from Slack's own file host
(or the configured Slack API host), with the bot token, never following redirects, and capped in size."""
from __future__ import annotations

import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from urllib.parse import urlparse

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


def download(url: str, token: str, max_bytes: int, hosts: set[str], timeout: float = 30) -> tuple[bytes, bool]:
    """Fetch a Slack file. Returns (data, truncated)."""
    parsed = urlparse(url)
    if parsed.scheme not in ("https", "http") or parsed.netloc not in hosts:
        raise DownloadRefused(f"not a Slack file URL ({parsed.netloc or url[:40]})")
    if parsed.scheme == "http" and parsed.hostname not in ("127.0.0.1", "localhost", "::1"):
        raise DownloadRefused("refusing to send the bot token over plain http")
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=timeout) as resp:
            data = resp.read(max_bytes + 1)
    except urllib.error.URLError as e:
        raise DownloadRefused(f"download failed ({getattr(e, 'reason', e)})") from None
    return data[:max_bytes], len(data) > max_bytes


def message_inputs(msg: dict, token: str, max_bytes: int, hosts: set[str], label: str) -> tuple[list[Input], list[str]]:
    """The pasted log (if any) and every attached text/gzip file of one Slack message, plus notes on skips."""
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
        if f.get("size") and int(f["size"]) > max_bytes:
            notes.append(f"`{name}` is {int(f['size']) >> 20} MiB; only the first {max_bytes >> 20} MiB were read")
        try:
            data, cut = download(url, token, max_bytes, hosts)
        except DownloadRefused as e:
            notes.append(f"skipped `{name}`: {e}")
            continue
        inputs.append(Input(name, data, "truncated at the size cap" if cut else ""))
    return inputs, notes
