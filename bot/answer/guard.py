"""The guard between an LLM's phrasing and the user: the phrasing may only say what the diagnosis says.

Accepted only if every citation is one of the sections handed to the model, every step of the diagnosis is
still there (same ids, same order), every env var, flag and config path it names is one the diagnosis names,
every value written next to a changed setting is that change's value, and no number appears that the
diagnosis or its cited sections do not contain. Meaning is checked too (see `meaning`): no command, destructive
verb, code span or path the diagnosis does not give, no step turned into its opposite or negated, no section-like
reference (any case, any script, path or file form) that is not a section it was given, and no echo of the
prompt's own instructions."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

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
    own: str = ""                 # what the diagnosis itself says (titles, steps, changes) and the sections' text
    material: str = ""            # own plus what it quotes from the log (evidence, facts)
    subjects: set[str] = field(default_factory=set)   # words naming what was found (oom, nccl, timeout, …)
    steps: dict[str, tuple[str, set[str]]] = field(default_factory=dict)   # step id -> (its text, its directions)
    pages: set[str] = field(default_factory=set)    # every runbook page name (efa, nccl-hangs, …)
    prompt: str = ""              # the instructions the model was given: never to be echoed back
    lang: str = ""                # the language asked for ("en", "ko"); empty: not checked
    quotes: list[str] = field(default_factory=list)   # titles and evidence as given: quoted, they are no language


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
    return meaning(answer, allowed)


# ---- meaning: what the words do, not only which tokens appear --------------------------------------------------
COMMAND_WORDS = re.compile(
    r"(?i)(?<![\w-])(sudo|rm|rmdir|mv|dd|mkfs(?:\.\w+)?|chmod|chown|curl|wget|ssh|scp|rsync|nc|kill|pkill|killall|reboot|"
    r"shutdown|poweroff|systemctl|kubectl|helm|docker|scancel|scontrol|sbatch|srun|pip3?|conda|apt(?:-get)?|yum|git|"
    r"bash|sh|zsh|eval|exec|truncate|shred|format|delete|deleting|remove|removing|wipe|erase|destroy|purge|drop|"
    r"삭제|지워|지우|포맷)(?![\w-])")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
PATH = re.compile(r"(?<![\w.:/~-])(~?/[\w.@%+-]+(?:/[\w.@%+-]*)*|[A-Za-z]:\\[\w\\.-]+)")
SECTION_REF = re.compile(r"(?<![\w#])((?:[\w.-]+/)*[\w.-]*\w)#([\w-]+)")
MD_REF = re.compile(r"(?i)(?<![\w-])((?:[\w.-]+/)*([\w-]+))\.md\b")
NUMBERED_SECTION = re.compile(r"(?i)§|\bsection\s+\d|\bchapter\s+\d|(?:섹션|절|장)\s*\d|\d+\s*(?:절|장)\b")
NEGATION = re.compile(r"(?i)\b(?:not|never|no longer|don't|doesn't|isn't|wasn't|shouldn't|avoid|instead of|rather than|"
                      r"ignore|skip|no need)\b|n't\b|아니|아닙|아님|않|말고|말아|무시|금지")
UP = re.compile(r"(?i)\b(?:increas\w*|rais\w*|doubl\w*|tripl\w*|larger|bigger|higher|more|grow\w*|enlarg\w*|"
                r"multipl\w*)\b|늘리|늘려|높이|높여|두\s*배|증가|키우|키워")
DOWN = re.compile(r"(?i)\b(?:decreas\w*|reduc\w*|lower\w*|halv\w*|half|less|smaller|fewer|shrink\w*|cut|divid\w*)\b|"
                  r"줄이|줄여|낮추|낮춰|절반|감소|반으로")


def directions(text: str) -> set[str]:
    return ({"up"} if UP.search(text) else set()) | ({"down"} if DOWN.search(text) else set())


def _words(text: str) -> set[str]:
    return {w.lower() for w in re.findall(r"[\w.-]+", text)}


def meaning(answer: PhrasedAnswer, allowed: Allowed) -> str | None:
    """What the phrasing does with the words: the checks that tokens and numbers alone miss."""
    if not (allowed.own or allowed.steps or allowed.prompt):
        return None
    text = answer.all_text()
    return (_template(text, allowed) or _language(answer, allowed) or _commands(text, allowed)
            or _references(text, allowed) or _opposites(answer, allowed) or _echo(text, allowed.prompt))


# a template slot copied back instead of filled ("<2-4 sentences: …>", "<step id>"); the masker's own placeholders
# (<IPV4_1>, <EC2_HOST_2>) are upper case with no space and stay allowed
TEMPLATE = re.compile(r"<[a-z0-9][^<>\n]*\s[^<>\n]*>|\.\.\.\s*$|^\s*…\s*$", re.M)
HANGUL = re.compile(r"[\uac00-\ud7a3]")
LETTER = re.compile(r"[A-Za-z\uac00-\ud7a3]")


def _template(text: str, allowed: Allowed) -> str | None:
    for m in TEMPLATE.finditer(text):
        if m.group(0).strip() and m.group(0) not in allowed.material:   # (a slot the asker or the log wrote is theirs)
            return f"returned template text instead of an answer: {m.group(0)[:40]!r}"
    return None


def _language(answer: PhrasedAnswer, allowed: Allowed) -> str | None:
    """The summary in the language asked for: Korean with Hangul in most of its letters, English with little —
    counted without the titles and evidence lines it quotes as given."""
    lang, own = allowed.lang, answer.summary
    for q in sorted(allowed.quotes, key=len, reverse=True):
        if len(q) >= 12:
            own = own.replace(q, " ")
    letters = LETTER.findall(own)
    if not lang or len(letters) < 12:
        return None
    share = len(HANGUL.findall(own)) / len(letters)
    if lang == "ko" and share < 0.3:
        return "answered in another language than the Korean asked for"
    if lang == "en" and share > 0.3:
        return "answered in another language than the English asked for"
    return None


def _commands(text: str, allowed: Allowed) -> str | None:
    own, material = allowed.own.lower(), allowed.material.lower()
    own_words = _words(own)
    for m in COMMAND_WORDS.finditer(text):
        if m.group(1).lower() not in own_words:
            return f"tells the reader to run or do something the diagnosis does not: {m.group(1)}"
    for span in CODE_SPAN.findall(text):
        if " ".join(span.lower().split()) not in " ".join(own.split()):
            return f"quotes code the diagnosis does not give: `{span[:40]}`"
    for p in PATH.findall(text):
        if p.lower().rstrip("/.") not in material:
            return f"names a path the diagnosis does not: {p[:60]}"
    return None


def _references(text: str, allowed: Allowed) -> str | None:
    cites = {c.lower() for c in allowed.cites}
    pages = {c.split("#")[0] for c in cites}
    for m in SECTION_REF.finditer(text):
        page = m.group(1).rsplit("/", 1)[-1].lower().removesuffix(".md")
        if f"{page}#{m.group(2).lower()}" not in cites:
            return f"cites a section it was not given: {m.group(0)[:60]}"
    for m in MD_REF.finditer(text):
        if m.group(2).lower() not in pages:
            return f"cites a runbook page it was not given: {m.group(0)[:60]}"
    for page in allowed.pages:   # page/anchor, a path to a section (prose such as EFA/InfiniBand from the diagnosis is not)
        for m in re.finditer(r"(?i)(?<![\w-])" + re.escape(page) + r"/([\w-]+)", text):
            if f"{page}#{m.group(1).lower()}" not in cites and _new(m.group(0), allowed.own):
                return f"cites a section it was not given: {m.group(0)[:60]}"
    if NUMBERED_SECTION.search(text):
        return "cites a numbered section, which the runbook does not have"
    return None


_NOT = r"(?:\bnot|\bnever|n't|\bno|\bnothing to do with|\brather than|\binstead of)"
_FOUND = ("cause", "problem", "issue", "error", "failure", "fault", "culprit", "원인", "문제", "장애")


def _opposites(answer: PhrasedAnswer, allowed: Allowed) -> str | None:
    for word in sorted(allowed.subjects | set(_FOUND), key=len, reverse=True):
        w = re.escape(word)
        for m in (*re.finditer(r"(?i)" + _NOT + r"\W+(?:\w+\W+){0,3}\w*" + w, answer.summary),
                  *re.finditer(r"(?i)" + w + r"\w{0,3}\s*\w{0,2}\s*아(?:니|닙|님|냐)", answer.summary)):
            if _new(m.group(0), allowed.own):   # the diagnosis' own words ("No EFA provider") are no denial
                return f"denies what the diagnosis found ({word})"
    for step in answer.steps:
        source, dirs = allowed.steps.get(step.id, ("", set()))
        said = directions(step.text)
        if dirs and said - dirs:
            return f"says the opposite of step {step.id}"
        verb = source.split()[0].lower() if source.split() else ""
        negated = re.search(r"(?i)(?:\bnot|\bnever|n't|\bavoid|\bskip|\bno need to|\bstop)\W+(?:\w+\W+){0,3}"
                            + re.escape(verb[:5]), step.text) if len(verb) >= 3 else None
        if (negated and _new(negated.group(0), source)) or (NEGATION.search(step.text) and not NEGATION.search(source)):
            return f"negates step {step.id}"
    return None


def _new(phrase: str, source: str) -> bool:
    """Whether the phrase is the model's own (not found, in any case or spacing, in what it was given)."""
    return " ".join(phrase.lower().split()) not in " ".join(source.lower().split())


def _echo(text: str, prompt: str, n: int = 6) -> str | None:
    """Six words in a row from the instructions: the model is repeating its prompt, not phrasing the diagnosis."""
    words = re.findall(r"\w+", prompt.lower())
    said = " " + " ".join(re.findall(r"\w+", text.lower())) + " "
    for i in range(len(words) - n + 1):
        if " " + " ".join(words[i:i + n]) + " " in said:
            return "repeats its instructions"
    return None
