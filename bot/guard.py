"""The guard between an LLM's phrasing and the user: the phrasing may only say what the diagnosis says.

Accepted only if every citation is one of the sections handed to the model, every step of the diagnosis is
still there (same ids, same order), every env var, flag and config path it names is one the diagnosis names,
every value written next to a changed setting is that change's value, and no number appears that the
diagnosis or its cited sections do not contain."""
from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

ENV_TOKEN = re.compile(r"(?<![A-Za-z0-9_<])[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+(?![A-Za-z0-9_>])")  # not <PLACEHOLDERS>
FLAG_TOKEN = re.compile(r"(?<![\w-])--[a-z][a-z0-9]*(?:-[a-z0-9]+)*")
CONFIG_TOKEN = re.compile(r"(?<![\w.])[a-z][a-z0-9]*(?:_[a-z0-9]+)+\.[a-z][a-z0-9_.]*[a-z0-9]|"
                          r"(?<![\w.])[a-z][a-z0-9]*\.[a-z][a-z0-9]*(?:_[a-z0-9]+)+(?:\.[a-z0-9_]+)*")
NUMBER = re.compile(r"(?<![\w.<])\d+(?:\.\d+)?(?:[eE]-?\d+)?(?![\w>])")
# a value written next to a setting: a number, a capitalised word (INFO, WARN) or true/false in any case; ordinary
# lower-case words ("is", "only") are prose, not values
VALUE_WORD = re.compile(r"\d+(?:\.\d+)?(?:[eE]-?\d+)?|\b[A-Z][A-Z0-9_]+\b|\b(?i:true|false)\b")


class PhrasedStep(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str
    text: str


class PhrasedAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")
    summary: str
    steps: list[PhrasedStep] = Field(default_factory=list)
    citations: list[str] = Field(default_factory=list)

    def all_text(self) -> str:
        return "\n".join([self.summary, *(s.text for s in self.steps)])


@dataclass
class Allowed:
    step_ids: list[str]
    cites: set[str]
    tokens: set[str]              # env vars, flags, config paths the diagnosis names
    numbers: set[str]             # every number in the diagnosis and its cited sections
    values: dict[str, set[str]]   # changed setting -> the values it may be given


def norm_number(s: str) -> str:
    try:
        f = float(s)
    except ValueError:
        return s
    return repr(int(f)) if f.is_integer() and abs(f) < 1e15 else repr(f)


def numbers_in(text: str) -> set[str]:
    return {norm_number(n) for n in NUMBER.findall(text)}


def tokens_in(text: str) -> set[str]:
    return set(ENV_TOKEN.findall(text)) | set(FLAG_TOKEN.findall(text)) | set(CONFIG_TOKEN.findall(text))


def value_keys(*values: object) -> set[str]:
    """The value words a change allows, normalised the way the guard reads them in prose."""
    out: set[str] = set()
    for v in values:
        if v is None:
            continue
        text = str(v).lower() if isinstance(v, bool) else str(v)
        for w in VALUE_WORD.findall(text):
            out.add(norm_number(w) if w[0].isdigit() else w.upper())
    return out


def check(answer: PhrasedAnswer, allowed: Allowed) -> str | None:
    """None when the answer may be shown; otherwise the reason it was rejected."""
    bad_cites = [c for c in answer.citations if c not in allowed.cites]
    if bad_cites:
        return f"cites sections it was not given: {', '.join(bad_cites[:3])}"
    for cite in re.findall(r"\b[a-z][a-z0-9-]*#[a-z0-9-]+\b", answer.all_text()):
        if cite not in allowed.cites:
            return f"cites a section it was not given: {cite}"
    ids = [s.id for s in answer.steps]
    if ids != allowed.step_ids:
        missing = [i for i in allowed.step_ids if i not in ids]
        extra = [i for i in ids if i not in allowed.step_ids]
        return (f"dropped steps {missing[:3]}" if missing else f"invented steps {extra[:3]}" if extra
                else "reordered the steps")
    text = answer.all_text()
    unknown = sorted(tokens_in(text) - allowed.tokens)
    if unknown:
        return f"names settings the diagnosis does not: {', '.join(unknown[:3])}"
    for name, vals in allowed.values.items():
        for m in re.finditer(r"(?<![A-Za-z0-9_-])" + re.escape(name) + r"(?![A-Za-z0-9_-])", text):
            window = re.split(r"[.;,\n)]\s|\n", text[m.end(): m.end() + 48], maxsplit=1)[0]
            if tokens_in(window):
                window = window[: min(window.find(t) for t in tokens_in(window))]
            for v in VALUE_WORD.findall(window):
                key = norm_number(v) if v[0].isdigit() else v.upper()
                if key not in vals:
                    return f"gives {name} the value {v}, which the diagnosis does not"
    stray = sorted(numbers_in(text) - allowed.numbers, key=len)
    if stray:
        return f"mentions numbers the diagnosis does not contain: {', '.join(stray[:3])}"
    return None
