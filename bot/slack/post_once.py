"""chat.postMessage exactly once. Slack can take a post and lose its reply (a 503 after the work was done, a
connection dropped before the answer came back); re-posting blindly then shows the answer twice. So:

- every post carries a unique key in its message metadata (`mark`), the first attempt included;
- the SDK never re-posts a message on its own (`NoRepost` wraps its retry handlers);
- before any retry the message is looked up by that key in its channel or thread (`find_posted`): when Slack has
  it, its ts is the answer and nothing is posted again.

The bot's client (bot.slack.client.slack_client) does the look-up at once; the outbox (bot.slack.outbox) does it before each
later retry, also in another process after a restart."""
from __future__ import annotations

import logging
import threading
import uuid
from contextlib import contextmanager
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry import RetryHandler

log = logging.getLogger("triage.slack")
MARK = "triage_answer"
POST = "chat.postMessage"
_job = threading.local()


@contextmanager
def job(key: str, resumed: bool = False):
    """Posts made on this thread inside the block are a job's (bot.store.journal): their keys are the job's key and their
    order (the same again when a job killed mid-way is run a second time), and in a resumed job each is looked up
    in Slack before it is posted."""
    _job.key, _job.n, _job.resumed = key, 0, resumed
    try:
        yield
    finally:
        _job.key, _job.resumed = None, False


def mark(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload with a unique post key in its metadata (kept when it already has one)."""
    if payload.get("metadata"):
        return payload
    if getattr(_job, "key", None):
        _job.n += 1
        key = f"{_job.key}.{_job.n}"
    else:
        key = uuid.uuid4().hex
    return {**payload, "metadata": {"event_type": MARK, "event_payload": {"post_key": key}}}


def _meta(m: Any) -> dict:
    if isinstance(m, str):
        import json
        try:
            m = json.loads(m)
        except ValueError:
            return {}
    return m if isinstance(m, dict) else {}


def find_posted(client, payload: dict[str, Any]) -> str | None:
    """The ts of the message Slack already holds for this payload's key (in its thread, or the channel), or None.
    Raises what the look-up raises (Slack still down): the caller then keeps the post for later."""
    want = _meta(payload.get("metadata"))
    if want.get("event_type") != MARK or not want.get("event_payload"):
        return None
    kw = {"channel": payload["channel"], "include_all_metadata": True, "limit": 200}
    resp = client.conversations_replies(ts=payload["thread_ts"], **kw) if payload.get("thread_ts") \
        else client.conversations_history(**kw)
    for m in resp.get("messages", []):
        meta = _meta(m.get("metadata"))
        if meta.get("event_type") == MARK and meta.get("event_payload") == want["event_payload"]:
            return m.get("ts", "")
    return None


def ambiguous(e: Exception) -> bool:
    """A failure after which Slack may still have taken the post: no reply (a dropped connection, a timeout) or a
    5xx. A 4xx or a 429 means it did not."""
    if isinstance(e, SlackApiError):
        return (getattr(e.response, "status_code", 0) or 0) >= 500
    return isinstance(e, (OSError, TimeoutError))


class NoRepost(RetryHandler):
    """One of the SDK's retry handlers, except that it never retries chat.postMessage (a re-post without a look-up
    is how one answer is shown twice)."""

    def __init__(self, inner: RetryHandler):
        super().__init__(max_retry_count=inner.max_retry_count, interval_calculator=inner.interval_calculator)
        self.inner = inner

    def can_retry(self, *, state, request, response=None, error=None) -> bool:
        if request.url.rstrip("/").endswith("/" + POST):
            return False
        return self.inner.can_retry(state=state, request=request, response=response, error=error)

    def prepare_for_next_attempt(self, *, state, request, response=None, error=None) -> None:
        self.inner.prepare_for_next_attempt(state=state, request=request, response=response, error=error)


def post(client, send, payload: dict[str, Any]):
    """Send a marked post with `send(payload)`; when the reply is lost, look the message up and answer with its ts
    (a stand-in response) instead of failing, or try once more when Slack does not have it and the connection (not
    Slack) failed. Anything else is raised as it was. In a resumed job the look-up comes first."""
    if getattr(_job, "resumed", False):
        ts = find_posted(client, payload)
        if ts:
            log.warning("a resumed job's post was already in Slack; not posted again")
            return _taken(client, payload, ts)
    try:
        return send(payload)
    except Exception as e:
        if not ambiguous(e):
            raise
        try:
            ts = find_posted(client, payload)
        except Exception:
            raise e from None
        if ts:
            log.warning("Slack took a post but its reply was lost (%s); found it, not posted again", type(e).__name__)
            return _taken(client, payload, ts)
        if isinstance(e, SlackApiError):
            raise
        return send(payload)


def _taken(client, payload: dict[str, Any], ts: str):
    from slack_sdk.web.slack_response import SlackResponse
    return SlackResponse(client=client, http_verb="POST", api_url=f"{client.base_url}{POST}", req_args={},
                         data={"ok": True, "channel": payload["channel"], "ts": ts}, headers={}, status_code=200)
