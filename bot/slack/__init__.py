"""The Slack bot: the Bolt app and its listeners (app), Block Kit builders (blocks), inputs from messages and files
(inputs), feedback and App Home (feedback), best-effort calls (calls), attached configs (config), the HTTP and Socket
Mode server (server), the per-user rate limit (ratelimit), the bounded work pool (workqueue), how work is taken on
(work), posting exactly once (post_once) and the outbox of posts that wait for Slack (outbox).
May import bot's top, answer, store, patch and report; never bot.cli."""
