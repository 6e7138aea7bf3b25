"""Deterministic text for people: root cause first, evidence with line numbers, steps with copyable changes."""
from __future__ import annotations

import json
import re

from bot.answer.i18n import finding_title, symptom_name, t
from core.models import Change, Diagnosis, Finding


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """Control characters from a log (OSC title and hyperlink sequences, BEL, backspace, C1 codes) shown as escapes,
    so printing a diagnosis never drives the reader's terminal. Newlines and tabs stay."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)


def json_safe(text: str) -> str:
    """The same for a JSON document: C1 codes (which json.dumps leaves raw with ensure_ascii=False) as \\u escapes."""
    return _CONTROL.sub(lambda m: f"\\u{ord(m.group(0)):04x}", text)


_JSON_KEY = re.compile(r"[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*")   # a dotted config key (DeepSpeed's JSON)


def literal(v) -> str:
    """A value as a config file or command line spells it (true/false for booleans)."""
    return "true" if v is True else "false" if v is False else str(v)


def _python(v) -> str:
    """A value inside a Python call: code stays code (timedelta(…), torch.bfloat16), words become strings."""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, str) and not re.search(r"[(.=<{]", v):
        return json.dumps(v)
    return str(v)


def change_text(c: Change, lang: str = "en") -> str:
    """One line per change, in the form it is pasted: `export X=1`, `--micro-batch-size 2`, `"gradient_clipping":
    0.5`, `Trainer(gradient_clip_val=0.5)`, `$ command`; the current value and any note after a `#`."""
    comment = [f"{t(lang, 'was')} {literal(c.from_)}"] if c.from_ is not None and c.kind != "command" else []
    if c.kind == "env":
        text = f"export {c.name}={literal(c.to)}" if c.to is not None else f"unset {c.name}"
    elif c.kind == "flag":
        if c.to is None and c.from_ is not None:   # a removal (DESIGN: `to: null` beside the value the log shows)
            text, comment = f"{t(lang, 'remove')} {c.name}", []
        elif c.to is None:                          # a flag whose value the note says how to pick
            text = c.name
        else:
            text = c.name if c.to is True else f"{c.name} {literal(c.to)}"
    elif c.kind == "config":
        if c.to is None and c.from_ is not None:
            text = f"{t(lang, 'remove')} {c.name}"
        elif c.to is None:
            text = c.name
        elif "…" in c.name:
            text = c.name.replace("…", _python(c.to), 1)
        elif _JSON_KEY.fullmatch(c.name):
            *outer, leaf = c.name.split(".")
            text = f'"{leaf}": {json.dumps(c.to, ensure_ascii=False)}'
            for key in reversed(outer):
                text = f'"{key}": {{{text}}}'
        else:
            text = f"{c.name}: {literal(c.to)}"
    else:
        text = f"$ {c.name}"
    if c.note and not (c.note in ("remove it", "지우세요") and c.to is None):
        comment.append(c.note)   # a removal already says so
    return text + (f"   # {'; '.join(comment)}" if comment else "")


def change_lines(changes: list[Change], lang: str = "en") -> list[str]:
    """Each change as a line to paste; a step's DeepSpeed keys under one top-level key become one JSON fragment
    (pasted as two lines, `"zero_optimization": {…}` twice would keep only the last)."""
    groups: dict[str, list[Change]] = {}
    order: list[Change | str] = []
    for c in changes:
        top = c.name.split(".")[0]
        if c.kind == "config" and c.to is not None and "." in c.name and _JSON_KEY.fullmatch(c.name):
            if top not in groups:
                order.append(top)
            groups.setdefault(top, []).append(c)
        else:
            order.append(c)
    out = []
    for x in order:
        if not isinstance(x, str):
            out.append(change_text(x, lang))
        elif len(groups[x]) == 1:
            out.append(change_text(groups[x][0], lang))
        else:
            out.append(_merged(x, groups[x], lang))
    return out


def _merged(top: str, changes: list[Change], lang: str) -> str:
    tree: dict = {}
    comment = []
    for c in changes:
        *path, leaf = c.name.split(".")[1:]
        node = tree
        for key in path:
            node = node.setdefault(key, {})
        node[leaf] = c.to
        if c.from_ is not None:
            comment.append(f"{'.'.join(c.name.split('.')[1:])} {t(lang, 'was')} {literal(c.from_)}")
        if c.note:
            comment.append(c.note)
    text = f'"{top}": {json.dumps(tree, ensure_ascii=False)}'
    return text + (f"   # {'; '.join(comment)}" if comment else "")


def _readable(v, limit: int = 100) -> str:
    """A fact as a person reads it: lists joined, records as 'key value' pairs, long ones cut at a separator."""
    if isinstance(v, dict):
        text = ", ".join(f"{k}: {_readable(x, 40)}" for k, x in list(v.items())[:4])
    elif isinstance(v, (list, tuple)):
        text = ("; " if any(isinstance(x, dict) for x in v) else ", ").join(_readable(x, 60) for x in v)
    elif isinstance(v, float):
        text = f"{v:g}"
    else:
        text = str(v)
    if len(text) > limit:
        cut = max(text.rfind(sep, 0, limit - 4) for sep in (", ", "; ", " "))
        text = text[:cut if cut > limit // 2 else limit - 4] + " …"
    return text


def _facts(f: Finding) -> str:
    """The facts in one line; an empty one (no lagging rank found) is left out of the text (the JSON keeps it)."""
    return " | ".join(f"{k}={_readable(v)}" for k, v in f.facts.items() if v not in (None, "", [], {}))


ROOT_STEPS = 4   # the root cause's steps shown in full; later rungs and clean-up follow in short blocks


def _step_lines(i: int | str, owner: str, text: str, changes: list[Change], cite: list[str], lang: str) -> list[str]:
    out = [f"    {i}{'.' if isinstance(i, int) else ''} [{t(lang, owner)}] {text}"]
    out += [f"         {line}" for line in change_lines(changes, lang)]
    out.append(f"         {t(lang, 'runbook')}: {', '.join(cite)}")
    return out


_CLEANUP_LEAD = re.compile(r"^(?:Also clean up|Also check|정리할 것|함께 점검)\s*:\s*")


def _steps_text(f: Finding, index: int, lang: str, phrased: dict[str, str] | None) -> list[str]:
    """The root cause's first steps in full, numbered; the next rungs after them; environment clean-up last, in its
    own block (its steps' 'Also clean up:' lead said once, as the block's heading)."""
    def text(s) -> str:
        return (phrased or {}).get(f"{index + 1}.{s.id}", s.text)
    root = [s for s in f.steps if not s.cleanup]
    rest = [s for s in f.steps if s.cleanup]
    out = [f"  {t(lang, 'steps')}:"]
    for i, s in enumerate(root[:ROOT_STEPS], 1):
        out += _step_lines(i, s.owner, text(s), s.changes, s.cite, lang)
    if root[ROOT_STEPS:]:
        out.append(f"  {t(lang, 'more')}:")
        for i, s in enumerate(root[ROOT_STEPS:], ROOT_STEPS + 1):
            out += _step_lines(i, s.owner, text(s), s.changes, s.cite, lang)
    if rest:
        out.append(f"  {t(lang, 'cleanup')}:")   # hygiene and routine checks, not the fix
        for s in rest:
            body = _CLEANUP_LEAD.sub("", text(s))
            out += _step_lines("-", s.owner, body[:1].upper() + body[1:], s.changes, s.cite, lang)
    return out


def finding_text(f: Finding, index: int, lang: str = "en", phrased: dict[str, str] | None = None,
                 show_steps: bool = True, verbose: bool = False) -> list[str]:
    head = t(lang, "root") if index == 0 else t(lang, "also")
    cause = f" ({t(lang, 'consequence')} {f.caused_by})" if f.caused_by else ""
    name = symptom_name(lang, f.symptom)
    label = f.symptom if name == f.symptom else f"{f.symptom} · {name}"
    out = [f"{head}  [{t(lang, f.severity)}] {label}{cause}: {finding_title(lang, f)}"]
    if f.evidence:
        out.append(f"  {t(lang, 'evidence')}:")
        out += [f"    {e.source or t(lang, 'line_n').format(n=e.line)}: {e.text[:240]}" for e in f.evidence]
    if verbose and (facts := _facts(f)):
        out.append(f"  {t(lang, 'facts')}: {facts}")
    if f.steps and show_steps:
        out += _steps_text(f, index, lang, phrased)
    return out


UNKNOWN_SHOWN = 3


def verdict_lines(d: Diagnosis, lang: str) -> list[str]:
    """With no finding: healthy, unless error-looking lines nobody explained are there — never call a crash healthy."""
    if not d.unclaimed:
        return [t(lang, "healthy_parts" if d.input.truncated else "healthy")]
    return [t(lang, "unknown")] + [f"  {t(lang, 'line_n').format(n=u['line'])} (×{u['count']}): {u['example'][:240]}"
                                   for u in d.unclaimed[:UNKNOWN_SHOWN]]


def diagnosis_text(d: Diagnosis, lang: str = "en", phrasing=None, verbose: bool = False) -> str:
    """The deterministic answer; with an accepted LLM phrasing, its summary and step prose replace ours while
    every change and citation still comes from the diagnosis itself. The facts the engine extracted (its working,
    kept whole in the JSON) only when `verbose`."""
    size = d.input.bytes
    human = f"{size / 2**20:.1f} MiB" if size >= 2**20 else f"{size / 1024:.1f} KiB" if size >= 1024 else f"{size} B"
    trunc = f", {t(lang, 'truncated')}" if d.input.truncated else ""
    lines = [f"== {d.input.name} ({d.input.lines} {t(lang, 'lines')}, {human}{trunc}) =="]
    lines += [f"  ({note})" for note in d.input.notes]
    phrased = None
    if phrasing is not None and phrasing.answer is not None:
        lines += [phrasing.answer.summary, f"({t(lang, 'phrased').format(model=phrasing.model)})", ""]
        phrased = {s.id: s.text for s in phrasing.answer.steps}
    if not d.findings:
        lines += verdict_lines(d, lang)
    for i, f in enumerate(d.findings):
        lines += finding_text(f, i, lang, phrased, show_steps=(i == 0 or f.caused_by is None), verbose=verbose)
        lines.append("")
    if d.step_time:
        lines.append(step_time_line(d.step_time, lang))
    versions = " · ".join(f"{k} {v}" for k, v in d.versions.items() if v)
    if versions:
        lines.append(f"{t(lang, 'versions')}: {versions}")
    return "\n".join(lines).rstrip() + "\n"


def step_time_line(st: dict, lang: str = "en") -> str:
    """The step-time facts in one line: the typical step, the slowest outliers, a lasting slowdown."""
    def at(x: dict) -> str:
        if "iteration" in x:
            return f"{'이터레이션' if lang == 'ko' else 'iteration'} {x['iteration']}"
        return f"{x['line']}번째 줄" if lang == "ko" else f"line {x['line']}"
    ko = lang == "ko"
    if "median_s" not in st:   # a log that prints throughput but no step time
        return throughput_text(st, lang)
    out = (f"{'스텝 시간' if ko else 'step time'}: {'중앙값' if ko else 'median'} {st['median_s']:g} s, p90 "
           f"{st['p90_s']:g} s ({st['steps']} {'스텝' if ko else 'steps'})")
    if st.get("anomalous_steps"):
        worst = st["anomalies"][0]
        out += (f"; {'이상하게 느린 스텝' if ko else 'unusually slow steps'}: {st['anomalous_steps']} "
                f"({'가장 느림' if ko else 'worst'} {worst['seconds']:g} s = {worst['x_median']:g}× {at(worst)})")
    if st.get("slowdown"):
        sd = st["slowdown"]
        out += (f"; {at(sd)}{'부터 지속적으로' if ko else ' on, a lasting slowdown of'} {sd['pct']:g}%"
                f"{' 느려짐' if ko else ''} ({sd['before_s']:g} s → {sd['after_s']:g} s)")
    tp = throughput_text(st, lang)
    return out + (f"; {tp}" if tp else "")


def throughput_text(st: dict, lang: str = "en") -> str:
    """TFLOP/s per GPU and model FLOPs utilisation as the log printed them (MFU only against a known GPU's peak)."""
    parts = []
    if "tflops_per_gpu" in st:
        parts.append(f"{st['tflops_per_gpu']:g} TFLOP/s per GPU" if lang != "ko" else f"GPU당 {st['tflops_per_gpu']:g} TFLOP/s")
    if "mfu_pct" in st:
        on = f" on {st['gpu_model']}" if lang != "ko" and st.get("gpu_model") else ""
        parts.append(f"MFU {st['mfu_pct']:g}%" + (f" ({st['gpu_model']})" if lang == "ko" and st.get("gpu_model") else on))
    return ", ".join(parts)
