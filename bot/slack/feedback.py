"""What people do with an answer in Slack: 👍/👎 and the right symptom on a diagnosis, and the App Home tab."""
from __future__ import annotations

from slack_sdk import WebClient

from bot.slack import blocks as kit
from bot.slack.calls import channels_of


class FeedbackHandlers:
    """Mixed into SlackBot (bot.slack.app), which provides `triage` and `settings`."""

    def on_vote(self, ack, body: dict, action: dict, client: WebClient) -> None:
        ack()
        user = body.get("user", {}).get("id", "")
        if action["action_id"] == "triage_wrong":
            did_s, _, symptom = action["selected_option"]["value"].partition(":")
            vote = "down"
            if symptom not in kit.symptom_choices():
                return
        else:
            did_s, symptom = action["value"], None
            vote = "up" if action["action_id"] == "triage_vote_up" else "down"
        store = self.triage.store
        row = store.get(int(did_s)) if store is not None and did_s.isdigit() else None
        if row is None:
            return
        did = int(did_s)
        store.vote(did, user, vote, symptom)
        d = store.diagnosis(did)
        channel = body.get("channel", {}).get("id") or row["channel"]
        ts = body.get("message", {}).get("ts") or row["message_ts"]
        if d is None or not channel or not ts:
            return
        blocks, _ = kit.diagnosis_blocks(d, did, self.settings.runbook_url, vote=kit.vote_blocks(vote, user, symptom))
        client.chat_update(channel=channel, ts=ts, blocks=blocks, text=kit.fallback_text(d))

    def on_cause_button(self, ack, body: dict, action: dict, client: WebClient) -> None:
        ack()
        if action.get("value", "").isdigit() and body.get("trigger_id"):
            client.views_open(trigger_id=body["trigger_id"], view=kit.cause_modal(int(action["value"])))

    def on_cause_submit(self, ack, body: dict, view: dict, client: WebClient) -> None:
        """A 👎 with the right symptom and the cause in words: stored like a picked symptom, and exported as a
        corpus case (`triage corpus export --feedback`) with the words in its note."""
        values = view.get("state", {}).get("values", {})
        symptom = ((values.get("symptom", {}).get("pick", {}) or {}).get("selected_option") or {}).get("value")
        cause = (values.get("cause", {}).get("text", {}) or {}).get("value") or ""
        did_s, store = view.get("private_metadata", ""), self.triage.store
        if symptom not in kit.symptom_choices():
            ack(response_action="errors", errors={"symptom": "Pick the symptom it really was."})
            return
        if store is not None and did_s.isdigit() and store.get(int(did_s)) is not None:
            store.vote(int(did_s), body.get("user", {}).get("id", ""), "down", symptom, cause)
        ack()   # after the vote is stored: the modal closes only on an answer that is kept

    def on_home(self, event: dict, client: WebClient, context) -> None:
        """Each person sees their own diagnoses and those of the channels they are in (as far as the bot can see),
        not the whole team's."""
        store, user = self.triage.store, event["user"]
        viewer = (user, channels_of(client, user))
        recent = store.recent(10, context.get("team_id"), viewer) if store else []
        counts = store.counts_since(7, context.get("team_id"), viewer) if store else {}
        client.views_publish(user_id=user, view=kit.home_view(recent, counts))
