"""A team's detection rules and symptoms (a playbook file's `rules:` and `symptoms:`), checked at load like its
playbooks: a pattern that does not compile, a symptom nobody declared, a rule the scanner could not look for —
each one line naming the file and the field. Declared symptoms join the registry (core.symptoms.register), so the
team's playbooks, root-cause ordering, the store and the report treat them like built-in ones."""
from __future__ import annotations

from typing import Any

from core import symptoms as S

MIN_LITERAL = 3


def literal_of(pattern: str) -> str | None:
    """The longest run of fixed characters every match must contain (top level of the pattern, groups included
    when they are not optional or alternatives), or None. Case-insensitive patterns have none."""
    import re._parser as sp   # Python's own regex parser: the pattern's structure, not a guess from its text
    try:
        tree = sp.parse(pattern)
    except Exception:   # syntax the `regex` module has and `re` lacks: the rule must name its literal
        return None
    if tree.state.flags & sp.SRE_FLAG_IGNORECASE:
        return None
    runs: list[str] = []
    _walk(list(tree), runs, [""])
    best = max(runs, key=len, default="")
    return best if len(best) >= MIN_LITERAL else None


def _walk(items: list, runs: list[str], cur: list[str]) -> None:
    import re._constants as c
    for op, av in items:
        if op is c.LITERAL:
            cur[0] += chr(av)
            continue
        if op is c.SUBPATTERN and not (av[1] or 0) & c.SRE_FLAG_IGNORECASE:   # (…) / (?P<name>…): required
            _walk(list(av[3]), runs, cur)
            continue
        if op in (c.MAX_REPEAT, c.MIN_REPEAT) and av[0] >= 1 and len(av[2]) == 1 and av[2][0][0] is c.LITERAL:
            cur[0] += chr(av[2][0][1])     # x+ / x{2,}: one x is certain, then the run ends
        runs.append(cur[0])
        cur[0] = ""
    runs.append(cur[0])


def nested_repeat(pattern: str) -> bool:
    """Whether an unbounded repeat holds another unbounded repeat ((a+)+, (\\w*\\s?)*): the shape that backtracks
    exponentially on a line that almost matches."""
    import re._constants as c
    import re._parser as sp
    try:
        tree = sp.parse(pattern)
    except Exception:
        return False

    def walk(items, inside: bool) -> bool:
        for op, av in items:
            if op in (c.MAX_REPEAT, c.MIN_REPEAT):
                unbounded = av[1] is c.MAXREPEAT or av[1] > 100
                if unbounded and inside:
                    return True
                if walk(list(av[2]), inside or unbounded):
                    return True
            elif op is c.SUBPATTERN and walk(list(av[3]), inside):
                return True
            elif op is c.BRANCH and any(walk(list(b), inside) for b in av[1]):
                return True
        return False
    return walk(list(tree), False)


def check(data: dict[str, Any]) -> str | None:
    """Register the file's symptoms (their facts: the named groups of their rules, and `count`), then check its
    rules. The first problem as one line, or None."""
    import regex
    groups: dict[str, set[str]] = {}
    compiled = []
    for i, rule in enumerate(data.get("rules", [])):
        where = f"rules[{i}]"
        try:
            rx = regex.compile(rule["pattern"])
        except regex.error as e:
            return f"{where}.pattern: not a valid regular expression ({e})"
        if nested_repeat(rule["pattern"]):
            return (f"{where}.pattern: a repeat inside a repeat (like (a+)+) can take hours on one line; "
                    "rewrite it without the nesting")
        if not rule["literal"]:
            rule["literal"] = literal_of(rule["pattern"])
            if not rule["literal"]:
                return (f"{where}.pattern: no fixed text of {MIN_LITERAL}+ characters to look for (a case-insensitive "
                        "or all-wildcard pattern); add `literal:` — text every matching line contains")
        groups.setdefault(rule["symptom"], set()).update(rx.groupindex)
        compiled.append((where, rule))
    for j, sym in enumerate(data.get("symptoms", [])):
        facts = tuple(sorted(groups.get(sym["id"], set()) | {"count"}))
        try:
            S.register(S.Symptom(sym["id"], S.TEAM, sym["severity"], sym["rank"], sym["title"],
                                 sym["title_ko"] or sym["title"], facts))
        except ValueError as e:
            return f"symptoms[{j}].id: {e}"
    for where, rule in compiled:
        if rule["symptom"] not in S.SYMPTOMS:
            from playbooks.check import _hint
            return (f"{where}.symptom: unknown symptom '{rule['symptom']}'{_hint(rule['symptom'], S.ids())}; "
                    "declare it under `symptoms:` in this file")
    return None
