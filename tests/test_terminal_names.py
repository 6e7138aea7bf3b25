"""File names, archive members and notes written on stderr never carry live terminal control sequences (issue 31,
item 18): an OSC 52 clipboard write or a CSI screen clear in a name shows as \\x1b escapes."""
import io
import os
import subprocess
import sys
import zipfile

import pytest

from conftest import FIXTURES, ROOT

OSC52 = "\x1b]52;c;ZXZpbA==\x07"
CSI = "\x1b[2J\x1b[H"


def _run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], cwd=ROOT, capture_output=True,
                          env={**os.environ, **(env or {})}, timeout=120)


def _inert(stream: bytes) -> None:
    assert b"\x1b" not in stream and b"\x07" not in stream, stream[:200]


def test_a_binary_file_with_an_osc52_name(tmp_path):
    p = tmp_path / f"evil{OSC52}.log"
    p.write_bytes(b"\x00\x01\x02 not text")
    r = _run("diagnose", str(p))
    assert r.returncode == 2 and b"binary" in r.stderr and b"\\x1b]52" in r.stderr
    _inert(r.stderr)


def test_a_missing_file_with_a_csi_name(tmp_path):
    r = _run("diagnose", str(tmp_path / f"gone{CSI}.log"))
    assert r.returncode == 2 and b"\\x1b[2J" in r.stderr
    _inert(r.stderr)


def test_archive_members_with_control_sequences_in_their_names(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"rank0{CSI}.log", b"\x00\x01binary member")
        z.writestr("rank1.log", (FIXTURES / "cuda_oom" / "new_format_fragmented.log").read_bytes())
    p = tmp_path / "logs.zip"
    p.write_bytes(buf.getvalue())
    r = _run("diagnose", str(p))
    assert b"CUDA" in r.stdout and b"rank0" in r.stderr
    _inert(r.stderr)
    _inert(r.stdout)


def test_notify_notes_name_files_inertly(tmp_path):
    from testkit.fakeslack import FakeSlack
    fake = FakeSlack().start()
    try:
        d = tmp_path / "job"
        d.mkdir()
        os.mkfifo(d / f"a{OSC52}.log")      # "skipped, not a regular file", said with its name
        (d / "b.log").write_bytes((FIXTURES / "cuda_oom" / "new_format_fragmented.log").read_bytes())
        r = _run("notify", "--channel", "C9", str(d), env={"SLACK_BOT_TOKEN": "xoxb-t", "SLACK_API_BASE_URL": fake.api,
                                                           "TRIAGE_DB": str(tmp_path / "n.db")})
        assert r.returncode == 0, r.stderr
        assert b"not a regular file" in r.stderr and b"\\x1b]52" in r.stderr
        _inert(r.stderr)
        _inert(r.stdout)
    finally:
        fake.stop()


def test_the_wrapper_keeps_newlines_tabs_and_a_leading_carriage_return():
    from bot.answer.terminal import SafeStderr
    out = io.StringIO()
    SafeStderr(out).write("\r  a\tb\n")
    SafeStderr(out).write(f"x{CSI}\ry\n")
    assert out.getvalue() == "\r  a\tb\n" + "x\\x1b[2J\\x1b[H\\x0dy\n"
