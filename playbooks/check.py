"""What the schema cannot see: that every name a playbook uses exists. A symptom from the registry, `facts.*` that
the playbook's symptoms carry, `job.*` from the job vocabulary, `versions.*` components, `version_rules.*` ids,
and citations of real runbook sections. Each problem is one line naming the field and the nearest valid name."""
from __future__ import annotations

import re
from typing import Any, Iterable, Iterator

from core import frameworks as FW
from core import job as J
from core import symptoms as S
from core import versions as V

PLACEHOLDER = re.compile(r"\{([a-z_]+(?:\.[A-Za-z0-9_]+)+)\}")   # {facts.x} in a step's text or a change's name
COMPUTE_OPS = ("ref", "halve", "double", "div", "add", "mul")          # the operations of a computed value
_PLAIN = ("rule", "symptom")


def _hint(name: str, valid: Iterable[str]) -> str:
    from difflib import get_close_matches   # only when something is wrong
    near = get_close_matches(name, list(valid), n=1, cutoff=0.6)
    return f" (did you mean {near[0]}?)" if near else ""


class Checker:
    """Checks validated playbook files; the runbook is read once, on the first citation checked."""

    def __init__(self, runbook_dir: str | None = None) -> None:
        self._runbook_dir = runbook_dir
        self._sections: frozenset[str] | None = None

    def _cites(self) -> frozenset[str]:
        if self._sections is None:
            from knowledge.runbook import load
            self._sections = frozenset(load(self._runbook_dir).sections)
        return self._sections

    def file(self, data: dict[str, Any]) -> str | None:
        """The first problem in a validated file (`PlaybookFile.model_dump()`), or None."""
        for i, pb in enumerate(data["playbooks"]):
            problem = self.playbook(pb, f"playbooks[{i}]")
            if problem:
                return problem
        return None

    def playbook(self, pb: dict[str, Any], where: str) -> str | None:
        names = pb["symptom"] if isinstance(pb["symptom"], list) else [pb["symptom"]]
        for name in names:
            if name not in S.SYMPTOMS:
                return f"{where}.symptom: unknown symptom '{name}'{_hint(name, S.IDS)}"
        facts = {f for name in names for f in S.SYMPTOMS[name].facts}
        for field, path in _paths(pb, where):
            problem = _path_problem(path, facts, names)
            if problem:
                return f"{field}: {problem}"
        for j, step in enumerate(pb["steps"]):
            for k, ch in enumerate(step["changes"]):
                if ch["kind"] == "setting" and ch["name"] not in FW.VOCAB:
                    return (f"{where}.steps[{j}].changes[{k}].name: unknown setting '{ch['name']}'"
                            f"{_hint(ch['name'], FW.VOCAB)}")
                problem = _from_problem(ch["from_"])
                if problem:
                    return f"{where}.steps[{j}].changes[{k}].from: {problem}"
            for cite in step["cite"]:
                if cite not in self._cites():
                    return (f"{where}.steps[{j}].cite: '{cite}' is not a runbook section"
                            f"{_hint(cite, self._cites())}")
        return None


def _from_problem(value: Any) -> str | None:
    """A change's `from` says what the job has now, so it can only be read from the log: {ref: job.x} (or facts.x,
    or a value computed from one) with no default. A literal or a default would show a playbook's guess as if the log said it."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"'{value}' is not read from the log; use {{ref: job.<setting>}} or leave `from` out"
    if value["default"] is not None:
        return f"a default ({value['default']}) would be shown as the job's current value; leave it out"
    return None


def _paths(pb: dict[str, Any], where: str) -> Iterator[tuple[str, str]]:
    """(field, path) for every path a playbook reads: conditions, computed values and {placeholders} in texts."""
    yield from ((f"{where}.when[{k}].path", c["path"]) for k, c in enumerate(pb["when"]))
    for j, step in enumerate(pb["steps"]):
        at = f"{where}.steps[{j}]"
        yield from ((f"{at}.when[{k}].path", c["path"]) for k, c in enumerate(step["when"]))
        for key in ("text", "text_ko"):
            yield from ((f"{at}.{key}", p) for p in PLACEHOLDER.findall(step[key] or ""))
        for k, ch in enumerate(step["changes"]):
            cat = f"{at}.changes[{k}]"
            yield from ((f"{cat}.when[{n}].path", c["path"]) for n, c in enumerate(ch["when"]))
            yield from ((f"{cat}.name", p) for p in PLACEHOLDER.findall(ch["name"]))
            for key in ("to", "from_"):
                value = ch[key]
                if isinstance(value, dict):
                    op = next(o for o in COMPUTE_OPS if value[o])
                    yield f"{cat}.{'from' if key == 'from_' else key}.{op}", value[op]


def _path_problem(path: str, facts: set[str], symptoms: list[str]) -> str | None:
    root, _, rest = path.partition(".")
    head = rest.split(".")[0]
    if root in _PLAIN and not rest:
        return None
    if root == "facts" and head:
        return None if head in facts else \
            f"'{path}': {', '.join(symptoms)} findings carry no fact '{head}'{_hint(head, facts)}"
    if root == "job" and head:
        if head == J.ENV and rest.count(".") == 1:
            return None
        return None if head in J.KEYS and "." not in rest else \
            f"'{path}': no job setting '{rest}'{_hint(head, J.KEYS)}"
    if root == "versions" and head:
        return None if rest in V.COMPONENTS else f"'{path}': no version '{rest}'{_hint(rest, V.COMPONENTS)}"
    if root == "version_rules" and head:
        return None if rest in V.BY_ID else f"'{path}': no version rule '{rest}'{_hint(rest, V.BY_ID)}"
    return f"'{path}': paths start with facts., job., versions. or version_rules. (or are rule / symptom)"
