"""`triage corpus export --feedback`: every diagnosis a user marked wrong (👎 with the right symptom picked) as a
corpus case for `triage eval`. The store keeps no raw log, so a case's text is the diagnosis' evidence lines in
line order — already masked of secrets when the diagnosis was made, and masked again here."""
from __future__ import annotations

import json
from datetime import datetime
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:   # sqlite_utils only when the command runs: a plain `triage diagnose` must not pay for it
    from bot.store.store import Store


def feedback_cases(store: "Store", since: datetime | None = None) -> Iterator[dict]:
    where, params = "correct_symptom is not null", []
    if since is not None:
        where += " and created_at >= ?"
        params.append(since.isoformat())
    from bot.store.store import load_doc
    from core.redact import mask_secrets
    for row in store.db.query("select id, created_at, top_symptom, correct_symptom, correct_text, diagnosis_json "
                              f"from diagnoses where {where} order by id", params):
        doc = load_doc(row["diagnosis_json"], row["id"])
        if doc is None:   # a damaged row: skipped (one log line), the other cases still come out
            continue
        lines = sorted({(e["line"], e["text"]) for f in doc.get("findings", []) for e in f.get("evidence", [])})
        if not lines:
            continue
        yield {"id": f"feedback-{row['id']}", "source": f"feedback:diagnosis/{row['id']}",
               "label": row["correct_symptom"], "also": [],
               "note": f"marked wrong on {row['created_at'][:10]}: the bot said {row['top_symptom'] or 'nothing'}"
                       + (f"; the user says: {mask_secrets(row['correct_text'])}" if row["correct_text"] else ""),
               "text": "\n".join(mask_secrets(t) for _, t in lines) + "\n"}


def cmd_corpus_export(args, settings) -> int:
    import sys

    from bot.store.store import now
    from bot.wiring import store
    if not args.feedback:
        print("triage: corpus export needs --feedback (the only source so far)", file=sys.stderr)
        return 2
    since = None
    if args.since:
        from bot.report.data import parse_since
        try:
            since = parse_since(args.since, datetime.fromisoformat(now()))
        except ValueError as e:
            print(f"triage: --since: {e}", file=sys.stderr)
            return 2
    for case in feedback_cases(store(settings), since):
        print(json.dumps(case, ensure_ascii=False))
    return 0


def add_parser(sub) -> None:
    c = sub.add_parser("corpus", help="corpus cases from what users said about answers")
    csub = c.add_subparsers(dest="corpus_cmd", required=True)
    e = csub.add_parser("export", help="JSON-lines cases (the corpus format) on stdout")
    e.add_argument("--feedback", action="store_true", help="diagnoses users marked wrong, labelled with their pick")
    e.add_argument("--since", help="7d, 24h, 2w or a date")
    e.set_defaults(func=cmd_corpus_export)
