"""The command line's conventions (issue 32): --version, a bare `triage`, a subcommand's own usage on a bad flag, a
prompt when stdin is a terminal, sizes with units in TRIAGE_MAX_BYTES, and shell completion from the argparse tree."""
import os
import pty
import select
import shutil
import subprocess
import sys
import time

import pytest

from conftest import FIXTURES, ROOT

TRIAGE = [sys.executable, "-m", "bot.cli"]


def triage(*args, env=None, stdin=None):
    e = {**os.environ, **(env or {})}
    return subprocess.run([*TRIAGE, *args], input=stdin, capture_output=True, cwd=ROOT, env=e, text=True,
                          timeout=120)


def test_version_prints_the_package_version():
    r = triage("--version")
    assert r.returncode == 0 and r.stdout.startswith("triage ") and r.stderr == ""


def test_a_bare_triage_is_a_usage_error():
    r = triage()
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("usage: triage ") and "diagnose" in r.stderr and "--help" in r.stderr


@pytest.mark.parametrize("args,usage", [
    (("diagnose", "--bogus", "x.log"), "usage: triage diagnose "),
    (("plan", "--params", "7B", "--gpus", "8", "--nope"), "usage: triage plan "),
    (("db", "backup", "--force", "copy.db"), "usage: triage db backup "),
    (("corpus", "export", "--everything"), "usage: triage corpus export "),
])
def test_a_bad_flag_shows_the_subcommands_own_usage(args, usage):
    r = triage(*args)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(usage), r.stderr
    assert "error: unrecognized arguments: " in r.stderr and "Traceback" not in r.stderr


def test_an_unknown_flag_of_diagnose_is_named():
    r = triage("diagnose", "--bogus", "x.log")
    assert r.stderr.splitlines()[-1] == "triage diagnose: error: unrecognized arguments: --bogus"


def _on_a_terminal(args, text: bytes) -> tuple[int, str, str]:
    """Run triage with stdin a pseudo-terminal: type `text`, then Ctrl-D. Returns (code, stdout, stderr)."""
    master, slave = pty.openpty()
    p = subprocess.Popen([*TRIAGE, *args], stdin=slave, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT)
    os.close(slave)
    try:
        deadline, seen = time.monotonic() + 60, b""
        while b"Ctrl-D" not in seen and time.monotonic() < deadline:   # the prompt comes before triage reads
            ready, _, _ = select.select([p.stderr], [], [], 0.5)
            if ready:
                seen += os.read(p.stderr.fileno(), 4096)
            if p.poll() is not None:
                break
        os.write(master, text + b"\x04")
        out, err = p.communicate(timeout=60)
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()
    return p.returncode, out.decode(), (seen + err).decode()


def test_stdin_on_a_terminal_says_it_is_waiting_and_ctrl_d_ends_it():
    line = (FIXTURES / "gpu_xid" / "xid79.log").read_bytes().splitlines()
    code, out, err = _on_a_terminal(["diagnose", "-"], b"\n".join(line[:40]) + b"\n")
    assert "waiting for the log on stdin" in err and "Ctrl-D" in err
    assert code == 0 and "gpu_xid" in out


def test_stdin_from_a_pipe_says_nothing_about_waiting():
    r = triage("diagnose", "-", stdin=(FIXTURES / "gpu_xid" / "xid79.log").read_text(encoding="utf-8"))
    assert r.returncode == 0 and "waiting" not in r.stderr and "gpu_xid" in r.stdout


@pytest.mark.parametrize("value,size", [
    ("10MB", 10 * 10**6), ("10mb", 10 * 10**6), ("512KB", 512_000), ("2GB", 2 * 10**9), ("10MiB", 10 << 20),
    ("64kib", 64 << 10), ("1GiB", 1 << 30), ("1.5MiB", 3 << 19), ("4 MB", 4 * 10**6), ("1_000_000", 1_000_000),
    ("4096", 4096),
])
def test_max_bytes_takes_a_unit(value, size):
    from bot.settings import Settings
    assert Settings.from_env({"TRIAGE_MAX_BYTES": value}).max_bytes == size
    assert Settings.from_env({"TRIAGE_MAX_FILE_BYTES": value}).max_file_bytes == size


@pytest.mark.parametrize("value", ["10XB", "ten MB", "MB", "-1MB", "0GB", "1.5", "10 M B", "1e6"])
def test_a_bad_size_is_one_line_and_exit_code_2(value):
    r = triage("diagnose", str(FIXTURES / "gpu_xid" / "xid79.log"), env={"TRIAGE_MAX_BYTES": value})
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("triage: TRIAGE_MAX_BYTES: ") and r.stderr.count("\n") == 1, r.stderr


def test_a_size_with_a_unit_caps_the_input(tmp_path):
    log = tmp_path / "big.log"
    log.write_bytes(b"step 1 loss 2.0\n" * 200_000)   # 3.2 MB
    r = triage("diagnose", "--json", str(log), env={"TRIAGE_MAX_BYTES": "1MB"})
    assert r.returncode == 0 and '"truncated": true' in r.stdout


def _parser_tree():
    import argparse

    from bot.cli.entry import build_parser
    root = build_parser()
    sub = next(a for a in root._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices


def test_bash_completion_covers_the_argparse_tree(tmp_path):
    r = triage("completion", "bash")
    assert r.returncode == 0 and r.stdout.startswith("# bash completion for triage")
    script = tmp_path / "triage.bash"
    script.write_text(r.stdout)
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    for name, parser in _parser_tree().items():
        assert f'"{name}")' in r.stdout, name
        for action in parser._actions:
            for opt in action.option_strings:
                assert opt in r.stdout, (name, opt)

    def complete(*words):
        cword = len(words)
        line = " ".join(f"'{w}'" for w in ("triage", *words))
        cmd = (f"source {script}; COMP_WORDS=({line}); COMP_CWORD={cword}; _triage; "
               'printf "%s\\n" "${COMPREPLY[@]}"')
        return subprocess.run(["bash", "-c", cmd], capture_output=True, text=True).stdout.split()
    assert "diagnose" in complete("di") and "completion" in complete("com")
    assert complete("diagnose", "--lang", "") == ["en", "ko"]
    assert set(complete("diagnose", "--j")) == {"--job", "--jobs", "--json"}
    assert complete("db", "") == ["backup"] and complete("corpus", "export", "--f") == ["--feedback"]
    assert complete("completion", "") == ["bash", "zsh"]
    assert complete("diagnose", "x.log", "") == []   # file names: left to bash's default completion


def test_zsh_completion_is_a_compdef_script():
    r = triage("completion", "zsh")
    assert r.returncode == 0 and r.stdout.startswith("#compdef triage")
    for name in _parser_tree():
        assert f"_triage_{name}()" in r.stdout, name
    assert "'--lang[language of the answer]:lang:(en ko)'" in r.stdout and "'1:value:(bash zsh)'" in r.stdout
    if shutil.which("zsh"):
        assert subprocess.run(["zsh", "-n"], input=r.stdout, text=True).returncode == 0


def test_completion_needs_a_known_shell():
    r = triage("completion", "fish")
    assert r.returncode == 2 and r.stderr.startswith("usage: triage completion ")
