"""A team's detection rules (loaded and checked with the playbooks: playbooks/rules.py) as one parser: the scanner
looks for each rule's literal, the rule's pattern is tried on the lines that hold it, and every rule that matched
gives one finding — its symptom, its title with {group} filled from the first match, the named groups as facts."""
from __future__ import annotations

import re
from typing import Any

import regex

from core.models import Finding
from core import symptoms
from parsers.base import RX_TIMEOUT, Context, EvidenceBox, Hit, Parser

_FIELD = re.compile(r"\{(\w+)\}")


class TeamRules(Parser):
    name = "team_rules"
    triggers: tuple[str, ...] = ()

    def __init__(self, rules: tuple[dict[str, Any], ...]) -> None:
        super().__init__()
        self.rules = [(r, regex.compile(r["pattern"])) for r in rules]
        self.triggers = tuple(dict.fromkeys(r["literal"] for r in rules))
        self.hits: dict[str, dict[str, Any]] = {}

    def feed(self, hit: Hit) -> None:
        t = hit.text
        for rule, rx in self.rules:
            if rule["literal"] not in t:
                continue
            try:
                m = rx.search(t, timeout=RX_TIMEOUT)
            except TimeoutError:
                continue
            if m is None:
                continue
            got = self.hits.get(rule["id"])
            if got is None:
                got = self.hits[rule["id"]] = {"facts": {k: v for k, v in m.groupdict().items() if v is not None},
                                               "count": 0, "ev": EvidenceBox()}
            got["count"] += 1
            got["ev"].add(hit.no, t)
            self.ev.hit(hit, t)

    def finish(self, ctx: Context) -> list[Finding]:
        out = []
        for rule, _ in self.rules:
            got = self.hits.get(rule["id"])
            if got is None:
                continue
            facts = {**got["facts"], "count": got["count"]}
            declared = symptoms.get(rule["symptom"])
            out.append(Finding(
                symptom=rule["symptom"], rule=rule["id"], confidence=rule["confidence"],
                title=_FIELD.sub(lambda m: str(facts.get(m.group(1), m.group(0))), rule["title"]),
                severity=rule["severity"] or (declared.severity if declared else "error"),
                evidence=got["ev"].items, facts=facts, first_line=got["ev"].first()))
        return out
