"""The Slack Web API client the bot posts with: every call's text defused (bot.answer.mrkdwn) and chat.postMessage
posted exactly once (bot.slack.post_once)."""
from __future__ import annotations

import functools


def slack_client(settings):
    """The Web API client with the bot token (and SLACK_API_BASE_URL when set: a local fake Slack in tests). Every
    call it makes passes through bot.answer.mrkdwn's pass over text (no live mention or link from a log or a model)."""
    from bot.answer.mrkdwn import runbook_links
    token = settings.slack_bot_token.get_secret_value() if settings.slack_bot_token else None
    kwargs = {"base_url": settings.slack_api_base_url} if settings.slack_api_base_url else {}
    return safe_client_class()(token=token, links=runbook_links(settings.runbook_url), **kwargs)


@functools.lru_cache(maxsize=None)
def safe_client_class():
    from slack_sdk import WebClient

    from bot.answer.mrkdwn import defuse_payload

    from bot.slack import post_once

    class SafeWebClient(WebClient):
        """A WebClient whose every call has its text fields defused (bot.answer.mrkdwn) just before it is sent, and whose
        chat.postMessage is posted once however its reply is lost (bot.slack.post_once)."""

        def __init__(self, *args, links: tuple[str, ...] = (), **kwargs):
            super().__init__(*args, **kwargs)
            self.links = links
            self.retry_handlers = [post_once.NoRepost(h) for h in self.retry_handlers]

        def api_call(self, api_method, *, http_verb="POST", files=None, data=None, params=None, json=None,
                     headers=None, auth=None):
            data, params, json = (defuse_payload(x, self.links) if x else x for x in (data, params, json))

            def send(body):
                return super(SafeWebClient, self).api_call(api_method, http_verb=http_verb, files=files, data=data,
                                                           params=params, json=body, headers=headers, auth=auth)
            if api_method == post_once.POST and isinstance(json, dict) and json.get("channel"):
                return post_once.post(self, send, post_once.mark(json))
            return send(json)
    return SafeWebClient
