"""Slack Web API calls that are best effort: decoration and look-ups whose failure must never cost an answer."""
from __future__ import annotations

import logging

from slack_sdk import WebClient

log = logging.getLogger("triage.slack")


def react(client: WebClient, channel: str, ts: str, name: str, remove: bool = False) -> None:
    """Reactions are decoration: a 429 or 5xx from them must never cost the answer."""
    try:
        (client.reactions_remove if remove else client.reactions_add)(channel=channel, timestamp=ts, name=name)
    except Exception as e:   # SlackApiError, a timeout, a dropped connection
        log.warning("reaction %s in %s not set: %s", name, channel, type(e).__name__)


def channels_of(client: WebClient, user: str) -> list[str]:
    try:
        resp = client.users_conversations(user=user, types="public_channel,private_channel", limit=1000)
        return [c["id"] for c in resp.get("channels", [])][:1000]
    except Exception as e:   # no scope or Slack down: the person still sees their own diagnoses
        log.warning("users.conversations for the home tab failed: %s", type(e).__name__)
        return []
