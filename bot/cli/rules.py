"""`triage rules new --from-unclaimed ID`: a skeleton team rule + symptom + playbook (one YAML file for a
TRIAGE_PLAYBOOKS directory) and a runbook stub, from an error template no parser claimed (the weekly report's
"unrecognised errors", each with its ID). The pattern is the template with its masked parts as named groups."""
from __future__ import annotations

import re
import sys
from pathlib import Path

# the placeholders core/templates.py masks with -> what matches them, the group name
_HOLES = {"<node:pid>": (r"\S+:\d+:\d+ \[\d+\]", "where"), "<path>": (r"\S+", "path"), "<ip>": (r"\S+", "ip"),
          "<host>": (r"\S+", "host"), "<hex>": (r"\w+", "hex"), "<n>": (r"\d+(?:\.\d+)?", "n")}
_SPLIT = re.compile("(" + "|".join(re.escape(h) for h in _HOLES) + ")")


def pattern_of(template: str) -> tuple[str, str]:
    """The template as a regex — fixed text escaped (runs of spaces as \\s+), each masked part a named group — and
    as a title with those groups as {placeholders}."""
    out, title, used = [], [], {}
    for part in _SPLIT.split(template):
        if part in _HOLES:
            rx, name = _HOLES[part]
            used[name] = used.get(name, 0) + 1
            name += str(used[name]) if used[name] > 1 else ""
            out.append(f"(?P<{name}>{rx})")
            title.append(f"{{{name}}}")
        elif part:
            out.append(r"\s+".join(re.escape(w) for w in part.split(" ")))
            title.append(part)
    return "".join(out), "".join(title)


def symptom_id(template: str) -> str:
    words = re.findall(r"[a-z]+", _SPLIT.sub(" ", template).lower())
    return "team_" + "_".join(w for w in words if len(w) > 2)[:36].rstrip("_") or "team_unrecognised_error"


def skeleton(template: str, example: str) -> tuple[str, str, str]:
    """(symptom id, YAML file text, runbook stub Markdown)."""
    from core.templates import shorten
    sid, title = symptom_id(template), shorten(template, 100)
    pattern, filled = pattern_of(template)
    q, fq = (x.replace("'", "''") for x in (title, filled))
    yaml_text = f"""# Team rule from an unrecognised error (`triage rules new`). Edit the title, severity and steps; check it with
#   TRIAGE_PLAYBOOKS=<this directory> triage eval <your corpus>.jsonl
# which also reports any answer the rule would change.
symptoms:
  - id: {sid}
    title: '{q}'
    severity: error
    rank: 20          # causal rank: 0 is hardware; lower ranks come first as the root cause
rules:
  - id: {sid.replace("team_", "team.", 1)}
    symptom: {sid}
    pattern: '{pattern.replace("'", "''")}'
    title: '{fq} ({{count}} lines)'
playbooks:
  - symptom: {sid}
    steps:
      - id: {sid.replace("team_", "team.", 1)}.first
        owner: infra      # or ml
        text: 'TODO: what to check or change first when this error appears.'
        cite: [collaboration#timeline-crosscheck]
"""
    stub = (f"## {title} {{#{sid.replace('_', '-')}}}\n\nSeen as:\n\n```\n{example.strip()}\n```\n\n"
            "What it means, how to confirm it, and what to change — in the team's own words.\n")
    return sid, yaml_text, stub


def cmd_rules_new(args, settings) -> int:
    from bot.wiring import store
    from core.redact import mask_secrets
    if not 0 < args.from_unclaimed < 1 << 63:   # SQLite's integers: a bigger one is no ID, not a crash
        print(f"triage: no unrecognised error {args.from_unclaimed} (IDs are positive numbers the weekly report "
              "lists)", file=sys.stderr)
        return 2
    rows = list(store(settings).db.query("select template, example from unclaimed where rowid = ?",
                                            [args.from_unclaimed]))
    if not rows:
        print(f"triage: no unrecognised error {args.from_unclaimed} in TRIAGE_DB (the weekly report lists their "
              "IDs)", file=sys.stderr)
        return 2
    from bot.service import recognised
    from bot.wiring import engine
    known = recognised(engine(settings), str(rows[0]["example"]))
    if known:
        print(f"triage: unrecognised error {args.from_unclaimed} is recognised now (as {known}): no rule written",
              file=sys.stderr)
        return 2
    sid, yaml_text, stub = skeleton(rows[0]["template"], mask_secrets(rows[0]["example"]))
    if not args.dir:
        print(yaml_text)
        return 0
    out = Path(args.dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
        target = out / f"{sid}.yaml"
        if target.exists():
            print(f"triage: {target} exists; not overwritten", file=sys.stderr)
            return 2
        target.write_text(yaml_text, encoding="utf-8")
        (out / f"{sid}.runbook.md").write_text(stub, encoding="utf-8")
    except OSError as e:
        print(f"triage: {out}: {e}", file=sys.stderr)
        return 2
    print(f"triage: wrote {target} and {out / (sid + '.runbook.md')}")
    return 0


def add_parser(sub) -> None:
    r = sub.add_parser("rules", help="team detection rules")
    rsub = r.add_subparsers(dest="rules_cmd", required=True)
    n = rsub.add_parser("new", help="a skeleton rule + symptom + playbook from an unrecognised error")
    n.add_argument("--from-unclaimed", type=int, required=True, metavar="ID",
                   help="the unrecognised error's ID (weekly report)")
    n.add_argument("--dir", help="write <symptom>.yaml and a runbook stub here (a TRIAGE_PLAYBOOKS directory); "
                                 "default: print the YAML")
    n.set_defaults(func=cmd_rules_new)
