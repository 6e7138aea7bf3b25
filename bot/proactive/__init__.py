"""Answers nobody asked for yet: `triage notify` posting a finished job's diagnosis (notify), `triage watch` over a
job-log directory (watch), and the weekly report's cron schedule (schedule). May import bot's top, answer, store and
slack (it posts with the Slack bot's blocks); never bot.cli."""
