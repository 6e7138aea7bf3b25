"""The `triage` command line: `entry` builds the argparse tree and runs a subcommand; one module per subcommand
(diagnose with emit and parallel, evaluate, plan, rules, corpus, notify, watch, report, serve, db, fleet, completion).
May import bot's top (settings, wiring, service), answer, store, proactive, fleet, patch and report; never bot.slack
(`triage serve` reaches the Slack bot through bot.wiring)."""
