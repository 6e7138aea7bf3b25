"""A config file attached in a Slack thread (a DeepSpeed/HF JSON or YAML, a launch or sbatch script): the thread's
diagnoses are answered with the fix as a diff of that file (bot/patch/patch.py), as `triage diagnose --config` does."""
from __future__ import annotations

import json
from typing import Any

from bot.slack import blocks as kit
from bot.slack.inputs import Input

CONFIG_EXT = (".json", ".yaml", ".yml", ".sh", ".bash", ".sbatch", ".slurm")
MAX_CONFIG_BYTES = 256 << 10


def split_configs(inputs: list[Input]) -> tuple[list[Input], list[tuple[str, str]], list[str]]:
    """(the inputs to diagnose, (name, text) of each config file, notes). A .json that does not parse as one JSON
    document is a JSON-lines log and stays an input."""
    logs, configs, notes = [], [], []
    for inp in inputs:
        name = inp.name.lower()
        if inp.maybe_chat or "(pasted text)" in inp.name or not name.endswith(CONFIG_EXT):
            logs.append(inp)
            continue
        head = inp.head(MAX_CONFIG_BYTES + 1)
        try:
            text = head.decode("utf-8")
            if name.endswith(".json"):
                json.loads(text)
        except (UnicodeDecodeError, ValueError):
            logs.append(inp)
            continue
        if len(head) > MAX_CONFIG_BYTES:
            notes.append(f"`{inp.name}` is over {MAX_CONFIG_BYTES >> 10} KiB: not read as a config")
            continue
        configs.append((inp.name, text))
    return logs, configs, notes


def diff_blocks(d, name: str, text: str) -> list[dict[str, Any]] | None:
    """The first root-cause step with a change for this file, as a unified diff; None when nothing applies."""
    from bot.patch.patch import patch
    fix = patch(d, name, text)
    if not fix.diff and not fix.not_applied:
        return None
    head = f":wrench: *Fix as a diff of `{kit.esc(name)}`*" + (f" (step {kit.esc(fix.step)})" if fix.step else "")
    body = kit._code(kit._safe(fix.diff, 2800)) if fix.diff else "_Nothing in this file to change._"
    blocks = [kit.section(f"{head}\n{body}")]
    if fix.not_applied:
        blocks.append(kit.context("Not applied (later steps, or not a setting of this file): "
                                  + kit.esc(kit.clip("; ".join(fix.not_applied), 2000))))
    return blocks
