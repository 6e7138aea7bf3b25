"""A diagnosis's fix as a unified diff of the user's own file: a DeepSpeed/HF JSON or YAML config, or a launch script
(Megatron / torchrun / accelerate flags, sbatch `export VAR=` lines).

Only the first step of the root cause that has a change for this kind of file is applied — the later steps are the
next rungs to try, not changes to stack — and every change that cannot go into this file is listed instead of being
forced in. Values already equal are left alone; a missing key is added in the file's own style."""
from __future__ import annotations

import difflib
import json
import re
from dataclasses import dataclass, field

from bot.patch.target import kind_of, reader_of, skip_reason, translate
from bot.answer.render import literal as _literal
from core.models import Change, Diagnosis


@dataclass
class Patch:
    diff: str = ""
    applied: list[str] = field(default_factory=list)
    not_applied: list[str] = field(default_factory=list)
    step: str | None = None


def _json(text: str, c: Change) -> str:
    doc = json.loads(text)
    path = c.name.lstrip("-").split(".") if c.kind == "config" else [c.name.lstrip("-")]
    node = doc
    for key in path[:-1]:
        node = node.setdefault(key, {}) if isinstance(node, dict) else {}
    if node.get(path[-1]) == c.to:
        return text
    leaf = list(re.finditer(rf'("{re.escape(path[-1])}"\s*:\s*)("[^"]*"|[\w.+-]+)', text))
    if len(leaf) == 1 and path[-1] in node:   # edit the one line in place: the rest of the file keeps its format
        return text[:leaf[0].start(2)] + json.dumps(c.to) + text[leaf[0].end(2):]
    node[path[-1]] = c.to
    indent = next((len(m.group(1)) for m in re.finditer(r"\n( +)\S", text)), 2)
    return json.dumps(doc, indent=indent, ensure_ascii=False) + ("\n" if text.endswith("\n") else "")


def _yaml(text: str, c: Change) -> str:
    path = c.name.lstrip("-").split(".") if c.kind == "config" else [c.name.lstrip("-")]
    lines, start, indent = text.splitlines(keepends=True), 0, ""
    for depth, key in enumerate(path):
        pat = re.compile(rf"^{re.escape(indent)}{re.escape(key)}:(.*)$")
        hit = next((i for i in range(start, len(lines)) if pat.match(lines[i].rstrip("\n"))), None)
        last = depth == len(path) - 1
        if hit is None:   # add the rest of the path at the end of this block, in the file's two-space style
            block = "".join(f"{indent}{'  ' * k}{p}:" + (f" {_literal(c.to)}\n" if k == len(path) - depth - 1 else "\n")
                            for k, p in enumerate(path[depth:]))
            end = next((i for i in range(start, len(lines)) if lines[i].strip()
                        and not lines[i].startswith(indent) and indent), len(lines))
            if end == len(lines) and lines and not lines[-1].endswith("\n"):
                lines[-1] += "\n"
            lines.insert(end, block)
            return "".join(lines)
        if last:
            lines[hit] = f"{indent}{key}: {_literal(c.to)}\n"
        else:
            start, indent = hit + 1, indent + "  "
    return "".join(lines)


def _script(text: str, c: Change) -> str:
    if c.kind == "env":
        line = re.compile(rf"^(\s*)export\s+{re.escape(c.name)}=\S*[^\n]*\n?", re.M)
        if c.to is None:
            return line.sub("", text)
        if line.search(text):
            return line.sub(lambda m: f"{m.group(1)}export {c.name}={_literal(c.to)}\n", text, count=1)
        exports = list(re.finditer(r"^\s*export\s+\w+=[^\n]*\n", text, re.M))
        at = exports[-1].end() if exports else (text.find("\n") + 1 if text.startswith("#!") else 0)
        return text[:at] + f"export {c.name}={_literal(c.to)}\n" + text[at:]
    flag = re.compile(rf"(?<!\S){re.escape(c.name)}(?:(=|[ \t]+)(?!--)([^\s\\]+))?(?=\s|$)")
    if c.to is None:   # a removal: the flag's own line when it stands alone there, else the flag and its blank before
        alone = re.compile(rf"^[ \t]*{re.escape(c.name)}(?:[ \t]*\\)?[ \t]*\n", re.M)
        if alone.search(text):
            return alone.sub("", text, count=1)
        return re.sub(rf"[ \t]*(?<!\S){re.escape(c.name)}(?=\s|$)", "", text, count=1)
    m = flag.search(text)
    value = "" if c.to is True else f" {_literal(c.to)}"
    if m:
        if c.to is True:
            return text
        return text[:m.start()] + f"{c.name}{m.group(1) or ' '}{_literal(c.to)}" + text[m.end():]
    flags = list(re.finditer(r"^([ \t]*)--[\w-]+[^\n]*\n", text, re.M))   # one argument per line
    if not flags:
        return text.rstrip("\n") + f" {c.name}{value}\n"
    last = flags[-1]
    line = last.group(0).rstrip("\n")
    if line.rstrip().endswith("\\"):   # inside a continued command: continue the new line too
        return text[:last.end()] + f"{last.group(1)}{c.name}{value} \\\n" + text[last.end():]
    before = text[:last.start()].rstrip("\n").rsplit("\n", 1)[-1]
    if before.rstrip().endswith("\\"):   # the last line of a continued command: it continues now
        return text[:last.start()] + f"{line.rstrip()} \\\n{last.group(1)}{c.name}{value}\n" + text[last.end():]
    return text[:last.end()] + f"{last.group(1)}{c.name}{value}\n" + text[last.end():]   # a bash array, a list


def patch(d: Diagnosis, name: str, text: str) -> Patch:
    kind, out = kind_of(name, text), Patch()
    reader = reader_of(kind, text)
    steps = [(s, [translate(c, reader) for c in s.changes]) for f in d.findings[:1] for s in f.steps]
    chosen = next((i for i, (_, cs) in enumerate(steps)
                   if any(skip_reason(c, kind, reader, text) is None for c in cs)), None)
    new = text
    for i, (s, changes) in enumerate(steps):
        for c in changes:
            if c.kind == "command":
                continue
            said = f"{s.id}: {c.kind} {c.name}" + ("" if c.to is None else f" = {_literal(c.to)}")
            why = skip_reason(c, kind, reader, new)
            if i != chosen or why:   # why a step up to the chosen one was passed over; later ones are next rungs
                out.not_applied.append(said + (f" ({why})" if why and (chosen is None or i <= chosen) else ""))
                continue
            after = {"json": _json, "yaml": _yaml, "script": _script}[kind](new, c)
            done = f"{c.name} removed" if c.to is None and c.kind == "flag" else f"{c.name} = {_literal(c.to)}"
            (out.applied if after != new else out.not_applied).append(done + ("" if after != new else " (already so)"))
            new = after
    out.step = steps[chosen][0].id if chosen is not None else None
    out.diff = "".join(difflib.unified_diff(text.splitlines(keepends=True), new.splitlines(keepends=True),
                                            f"a/{name}", f"b/{name}"))
    return out
