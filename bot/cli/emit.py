"""Printing one diagnosis from `triage diagnose`: text or JSON, phrased by the LLM when asked, with the fix as a
diff of the user's config, stored on --record."""
from __future__ import annotations

import json
import os
import sys

from core.facts import LOG_HOLDS_HOST


def _record(store, d, job: str | None) -> int | None:
    """Store one diagnosis; a full or broken database is one line on stderr, and the diagnosis is still shown."""
    import sqlite3
    try:
        return store.record(d, source="cli", job_key=job or "")
    except sqlite3.Error as e:
        print(f"triage: {d.input.name}: not stored in TRIAGE_DB ({e})", file=sys.stderr)
        return None


class Emitter:
    """Prints one diagnosis (text or JSON, phrased, with the config's diff; recorded on --record) and counts the
    logs that hold one node's share of a multi-node job."""

    def __init__(self, args, store, phraser, config) -> None:
        self.args, self.store, self.phraser, self.config = args, store, phraser, config
        self.shares = 0

    def __call__(self, d) -> None:
        from bot.answer.render import diagnosis_text, json_safe, terminal_safe
        args, store, phraser, config = self.args, self.store, self.phraser, self.config
        self.shares += any(LOG_HOLDS_HOST in f.facts for f in d.findings)
        did = _record(store, d, args.job) if (store is not None and args.record) else None
        phrasing = phraser.phrase(d, args.lang, did) if phraser else None
        if phrasing is not None and phrasing.answer is None and d.findings:
            print(f"triage: LLM answer not used ({phrasing.reason}); showing the deterministic diagnosis",
                  file=sys.stderr)
        fix = _patch(d, args.config, config) if config is not None and d.findings else None
        if args.json:
            doc = d.to_json_dict()
            if fix is not None:
                doc["diff"], doc["not_applied"] = fix.diff, fix.not_applied
            if phrasing is not None:
                doc["phrasing"] = {"model": phrasing.model, "lang": phrasing.lang, "outcome": phrasing.reason,
                                   "answer": phrasing.answer.model_dump() if phrasing.answer else None}
            print(json_safe(json.dumps(doc, ensure_ascii=False)))
        else:
            from bot.answer.terminal import for_terminal
            text = terminal_safe(diagnosis_text(d, args.lang, phrasing, verbose=getattr(args, "verbose", False)))
            print(for_terminal(text, getattr(args, "color", "auto")), end="")
            if fix is not None:
                print(terminal_safe(_fix_text(fix, args.config)))
        sys.stdout.flush()

    def done(self) -> None:
        """After the last diagnosis: the hint to read node shares together, when there were several."""
        if self.shares > 1:
            print(f"triage: {self.shares} of these logs each hold one node's ranks of a multi-node job; read them as "
                  "one with --together to see which rank is behind", file=sys.stderr)


def _patch(d, path: str, text: str):
    from bot.patch.patch import patch
    return patch(d, os.path.basename(path), text)


def _fix_text(fix, path: str) -> str:
    head = f"Fix as a diff of {path}" + (f" (step {fix.step})" if fix.step else "") + ":"
    out = [head, fix.diff.rstrip("\n") if fix.diff else "  (nothing in this file to change)"]
    if fix.not_applied:
        out += ["Not applied (later steps to try next, or not a setting of this file):"] + [f"  - {x}" for x in fix.not_applied]
    return "\n".join(out)
