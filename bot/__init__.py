"""The adapters: turn an event (a Slack message, a command line) into an input for the engine and render its
Diagnosis back. One package per interface; at the top only what every interface shares: `settings` (the one Settings
object from the environment), `wiring` (the engine, store, Slack client and bot built from Settings) and `service`
(diagnose, store, hand back). Nothing here imports parsers/ directly: the engine exposes what it accepts.
tests/test_architecture.py holds the rules of which package may import which."""
