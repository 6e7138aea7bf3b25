"""The text on a terminal (issue 30): step texts wrapped to the width under their own indentation while changes and
evidence stay whole lines, colour only on a terminal or with --color always (NO_COLOR honoured), and --version."""
import io
import os
import subprocess
import sys

from bot.answer.terminal import colour, for_terminal, use_color, wrap
from conftest import ROOT

TEXT = ("ROOT CAUSE  [critical] cuda_oom: CUDA out of memory on GPU 3\n"
        "  steps:\n"
        "    1. [ML] Halve the micro-batch from 4. Keep --global-batch-size as it is: Megatron then runs twice as many "
        "micro-batches per step, so the global batch does not change.\n"
        "         --micro-batch-size 2   # was 4; a long note that goes on and on well past any terminal width at all\n"
        "         runbook: oom#micro-batch\n")


class Tty(io.StringIO):
    def isatty(self):
        return True


def test_step_text_wraps_under_its_indent_and_changes_stay_one_line():
    out = wrap(TEXT, 60).splitlines()
    step = [ln for ln in out if ln.startswith("    1. ") or ln.startswith("       ") and not ln.startswith("         ")]
    assert len(step) >= 3 and all(len(ln) <= 60 for ln in step)
    assert all(ln.startswith("       ") for ln in step[1:])
    assert "         --micro-batch-size 2   # was 4; a long note that goes on and on well past any terminal width at all" in out


def test_colour_only_where_a_person_reads_it(monkeypatch):
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert use_color("always", io.StringIO()) and not use_color("never", Tty())
    assert use_color("auto", Tty()) and not use_color("auto", io.StringIO())
    monkeypatch.setenv("NO_COLOR", "1")
    assert not use_color("auto", Tty()) and use_color("always", io.StringIO())
    painted = colour(TEXT)
    assert painted.startswith("\x1b[31;1mROOT CAUSE") and "\x1b[36m         --micro-batch-size 2" in painted
    assert for_terminal(TEXT, "auto", io.StringIO()) == TEXT      # a pipe: as printed, whole lines


def test_cli_version_and_color_flag():
    run = lambda *a, **env: subprocess.run([sys.executable, "-m", "bot.cli", *a], cwd=ROOT, capture_output=True,   # noqa: E731
                                           text=True, env={**os.environ, **env})
    v = run("--version")
    assert v.returncode == 0 and v.stdout.startswith("triage ")
    plain = run("diagnose", str(ROOT / "examples" / "dmesg-xid79.log")).stdout
    always = run("diagnose", "--color", "always", str(ROOT / "examples" / "dmesg-xid79.log")).stdout
    assert "\x1b[" not in plain and "\x1b[31;1mROOT CAUSE" in always
    assert "\x1b[" not in run("diagnose", "--color", "never", str(ROOT / "examples" / "dmesg-xid79.log")).stdout


def test_korean_wraps_by_display_width():
    from bot.answer.terminal import columns
    ko = "    1. [ML] " + "활성화를 저장하지 말고 역전파에서 다시 계산하세요 " * 4 + "\n"
    out = wrap(ko, 60).splitlines()
    assert len(out) > 2 and all(columns(ln) <= 60 for ln in out)
    assert all(ln.startswith("       ") for ln in out[1:])
