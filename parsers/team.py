"""A team's detection rules (loaded and checked with the playbooks: playbooks/rules.py) as one parser: the scanner
looks for each rule's literal, the rule's pattern is tried on the lines that hold it, and every rule that matched
gives one finding — its symptom, its title with {group} filled from the first match, the named groups as facts."""
from __future__ import annotations

import re
import time
from typing import Any

import regex

from core.models import Finding
from core import symptoms
from parsers.scan.base import RX_TIMEOUT, Context, EvidenceBox, Hit, Parser

_FIELD = re.compile(r"\{(\w+)\}")
RULE_BUDGET_S = 2.0   # seconds one team rule may spend on one log before it is switched off for that log


class TeamRules(Parser):
    name = "team_rules"
    triggers: tuple[str, ...] = ()

    def __init__(self, rules: tuple[dict[str, Any], ...]) -> None:
        super().__init__()
        self.rules = [(r, regex.compile(r["pattern"])) for r in rules]
        self.triggers = tuple(dict.fromkeys(r["literal"] for r in rules))
        self.hits: dict[str, dict[str, Any]] = {}
        self.spent: dict[str, float] = {}
        self.off: dict[str, str] = {}   # rule id -> why it stopped reading this log

    def feed(self, hit: Hit) -> None:
        t = hit.text
        for rule, rx in self.rules:
            if rule["literal"] not in t or rule["id"] in self.off:
                continue
            began = time.perf_counter()
            try:
                m = rx.search(t, timeout=RX_TIMEOUT)
            except TimeoutError:
                self.off[rule["id"]] = f"its pattern ran over {RX_TIMEOUT:g} s on line {hit.no}"
                continue
            finally:
                spent = self.spent[rule["id"]] = self.spent.get(rule["id"], 0.0) + time.perf_counter() - began
                if spent > RULE_BUDGET_S and rule["id"] not in self.off:
                    self.off[rule["id"]] = f"it spent over {RULE_BUDGET_S:g} s on this log"
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
        ctx.notes += [f"team rule {rid} was switched off for the rest of this log: {why} (a pattern that backtracks "
                      "badly; the lines after it were not checked by it)" for rid, why in self.off.items()]
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
