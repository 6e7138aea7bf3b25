"""What a reader sees of a Diagnosis: the deterministic renderer (render), its words per language (i18n) and Korean
titles (titles_ko), the optional LLM phrasing (llm) behind its guard (guard), Slack mrkdwn defusing (mrkdwn), the
terminal's wrapping and colour (terminal) and a plan's text (plan). May import only bot.settings from bot."""
