"""The one place text becomes Slack mrkdwn: every message, update, view and response_url answer the bot sends passes
through `defuse_payload` on its way out (bot.slack.client.SafeWebClient for Web API calls, `safe_respond` for
response_url answers). Builders escape what they interpolate (bot.slack.blocks.esc); this pass makes a missed one
harmless on every surface, present and future: any Slack control sequence `<…>` that is not one the bot writes
itself — a user or channel mention by id, a link into the configured runbook — is escaped, so a log line or a model
answer holding `<!channel>`, `<!subteam^…>`, `<mailto:…|Click here>` or `<https://evil|label>` shows as text."""
from __future__ import annotations

import re
from typing import Any, Iterable

_SEQ = re.compile(r"<([^<>]*)>|[<>]")
_MENTION = re.compile(r"@[UW][A-Z0-9]{1,24}|#[CG][A-Z0-9]{1,24}")
# fields that Slack reads as mrkdwn (or as the notification text) in the payloads the bot sends
_TEXT_KEYS = ("text", "initial_comment", "alt_text", "fallback", "pretext", "title")


def defuse(text: str, links: Iterable[str] = ()) -> str:
    """`text` with every `<…>` Slack would act on escaped, except mentions by id and links starting with one of
    `links` (the runbook's URL). Entities already escaped (`&lt;`) are left as they are."""
    prefixes = tuple(p for p in links if p)

    def keep(m: re.Match) -> str:
        inner = m.group(1)
        if inner is not None:
            if _MENTION.fullmatch(inner):
                return m.group(0)
            url = inner.split("|", 1)[0]
            if prefixes and url.startswith(prefixes) and not re.search(r"\s", url):
                return m.group(0)
        return m.group(0).replace("<", "&lt;").replace(">", "&gt;")
    return _SEQ.sub(keep, text)


def defuse_payload(obj: Any, links: Iterable[str] = ()) -> Any:
    """A copy of a Slack payload (dict, list, blocks as a JSON string) with `defuse` applied to every text field.
    plain_text objects are left alone (Slack never parses them), so headers keep their characters."""
    links = tuple(links)
    if isinstance(obj, list):
        return [defuse_payload(x, links) for x in obj]
    if not isinstance(obj, dict):
        return obj
    if obj.get("type") == "plain_text":
        return obj
    out = {}
    for k, v in obj.items():
        if isinstance(v, str) and k in _TEXT_KEYS:
            out[k] = defuse(v, links)
        elif k in ("blocks", "attachments", "view") and isinstance(v, str) and v[:1] in "[{":
            out[k] = _defuse_json(v, links)
        elif isinstance(v, (dict, list)):
            out[k] = defuse_payload(v, links)
        else:
            out[k] = v
    return out


def _defuse_json(raw: str, links: tuple[str, ...]) -> str:
    import json
    try:
        return json.dumps(defuse_payload(json.loads(raw), links), ensure_ascii=False)
    except ValueError:
        return defuse(raw, links)


def safe_respond(respond, links: Iterable[str] = ()):
    """Bolt's `respond` (a slash command's response_url), with the same pass over what it sends."""
    links = tuple(links)

    def send(*args, **kwargs):
        if args and isinstance(args[0], str):
            args = (defuse(args[0], links), *args[1:])
        return respond(*args, **defuse_payload(kwargs, links))
    return send


def outgoing(fn, client=None, links: Iterable[str] = ()):
    """A Bolt listener that sends through `client` (bot.slack.client.slack_client's, which defuses every call) and a
    defused `respond`: Bolt hands each listener a fresh plain WebClient, which would skip the pass."""
    import functools
    links = tuple(links)

    @functools.wraps(fn)
    def call(**kwargs):
        if client is not None and "client" in kwargs:
            kwargs["client"] = client
        if kwargs.get("respond") is not None:
            kwargs["respond"] = safe_respond(kwargs["respond"], links)
        return fn(**kwargs)
    return call


def runbook_links(runbook_url: str | None) -> tuple[str, ...]:
    """The link prefixes the bot writes itself: the configured runbook (as bot.slack.blocks.cite_text makes them)."""
    return (runbook_url.rstrip("/") + "/",) if runbook_url else ()
