"""A full disk or a read-only database degrades with one line, and the answer still goes out: mentions and shortcuts
are answered (with a note that the diagnosis was not stored), `diagnose --record` prints its diagnosis, and `report`
and `db backup` still read the database. `triage serve` refuses a database it cannot write at start-up.

Full is SQLite's own 'database or disk is full': every page of the database is filled, then each connection's
max_page_count is pinned at the file's size. Read-only is a real read-only database: as root (which ignores file
modes) the file and its directory are made immutable (chattr +i), otherwise they are chmod'ed read-only."""
import os
import shutil
import sqlite3
import subprocess
import sys
import uuid

import pytest

from conftest import FIXTURES, ROOT

XID = (FIXTURES / "gpu_xid" / "xid79.log").read_text()
OOM = (FIXTURES / "cuda_oom" / "new_format_fragmented.log").read_text()


def _fill(path) -> None:
    """Fill every table's pages (and the free list) of the database at `path`, with the page count pinned."""
    conn = sqlite3.connect(str(path))
    pages = conn.execute("pragma page_count").fetchone()[0]
    conn.execute(f"pragma max_page_count = {pages + 2}")
    tables = [r[0] for r in conn.execute("select name from sqlite_master where type = 'table' and name not like "
                                         "'sqlite_%' and name not like '%_fts%'")]
    for table in tables:
        cols = conn.execute(f"pragma table_info([{table}])").fetchall()
        for size in (20000, 2000, 200, 20, 2, 0):
            while True:
                row = [os.urandom(4).hex() if c[2] != "TEXT" and c[2] else ("x" * size + uuid.uuid4().hex)
                       for c in cols]
                row = [int.from_bytes(os.urandom(6), "big") if c[2] == "INTEGER" else v for c, v in zip(cols, row)]
                try:
                    conn.execute(f"insert into [{table}] values ({', '.join('?' for _ in cols)})", row)
                    conn.commit()
                except sqlite3.IntegrityError:
                    continue
                except sqlite3.OperationalError as e:
                    assert "full" in str(e)
                    conn.rollback()
                    break
    conn.close()


@pytest.fixture
def full(monkeypatch):
    """Every new Store connection is pinned at its database's current size: a full disk, as SQLite reports it."""
    from bot.store.store import Store
    real = Store.db.fget

    def pinned(self):
        new = getattr(self._local, "db", None) is None
        db = real(self)
        if new:
            pages = db.conn.execute("pragma page_count").fetchone()[0]
            db.conn.execute(f"pragma max_page_count = {pages}")
        return db
    monkeypatch.setattr(Store, "db", property(pinned))


def test_a_full_database_still_answers_mentions_and_shortcuts(slack_bot, full):
    h = slack_bot()
    _fill(h.settings.db)
    h.fake.threads[("C1", "3.1")] = [{"user": "U1", "ts": "3.1", "text": "<@UBOT>\n" + XID}]
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT>", "ts": "3.1", "channel": "C1"}, "EvFull")
    h.interactive({"type": "message_action", "callback_id": "diagnose_message", "trigger_id": "t1",
                   "team": {"id": "T1"}, "user": {"id": "U1"}, "channel": {"id": "C2"},
                   "message": {"ts": "4.1", "text": OOM, "user": "U1"}})
    posts = h.fake.wait(lambda: {p.get("channel") for p in h.fake.posted if "Root cause" in str(p.get("text"))
                                 or "gpu_xid" in str(p.get("text")) or "cuda_oom" in str(p.get("text"))} >= {"C1", "C2"}
                        and h.fake.called("chat.postMessage"))
    texts = " ".join(str(p.get("blocks")) for p in posts)
    assert "could not be stored" in texts and "full" in texts


def _cli(args, db, **env):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "TRIAGE_"))}
    e.update({"TRIAGE_DB": str(db), **env})
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], cwd=ROOT, env=e, capture_output=True, text=True,
                          timeout=120)


def _recorded_db(tmp_path):
    db = tmp_path / "ro" / "t.db"
    log = tmp_path / "xid79.log"
    log.write_text(XID)
    assert _cli(["diagnose", "--record", str(log)], db).returncode == 0
    return db, log


@pytest.fixture
def read_only(tmp_path):
    made = []

    def make(path):
        d = path.parent
        if os.geteuid() == 0:
            if not shutil.which("chattr") or subprocess.run(["chattr", "+i", str(path), str(d)]).returncode:
                pytest.skip("running as root without chattr +i: cannot make a read-only database")
            made.append(lambda: subprocess.run(["chattr", "-i", str(path), str(d)]))
        else:
            path.chmod(0o444)
            d.chmod(0o555)
            made.append(lambda: (d.chmod(0o755), path.chmod(0o644)))
    yield make
    for undo in made:
        undo()


def test_a_read_only_database_is_still_read_and_recording_degrades(tmp_path, read_only):
    db, log = _recorded_db(tmp_path)
    read_only(db)
    r = _cli(["diagnose", "--record", str(log)], db)
    assert r.returncode == 0 and "gpu_xid" in r.stdout, r.stderr
    assert "not stored in TRIAGE_DB" in r.stderr and "Traceback" not in r.stderr
    r = _cli(["report", "--out", str(tmp_path / "out")], db)
    assert r.returncode == 0 and "1 diagnoses" in r.stdout and "Traceback" not in r.stderr, r.stderr
    r = _cli(["db", "backup", str(tmp_path / "copy.db")], db)
    assert r.returncode == 0, r.stderr
    assert sqlite3.connect(str(tmp_path / "copy.db")).execute("select count(*) from diagnoses").fetchone() == (1,)
    r = _cli(["serve", "--port", "1"], db, SLACK_BOT_TOKEN="xoxb-1", SLACK_SIGNING_SECRET="s")
    assert r.returncode == 2 and "TRIAGE_DB" in r.stderr.strip().splitlines()[-1] and "Traceback" not in r.stderr


def test_a_full_database_still_prints_the_diagnosis_and_reads_for_report_and_backup(tmp_path, full, capsys,
                                                                                    monkeypatch):
    from bot.cli.entry import main
    db, log = _recorded_db(tmp_path)
    _fill(db)
    monkeypatch.setenv("TRIAGE_DB", str(db))
    assert main(["diagnose", "--record", str(log)]) == 0
    out, err = capsys.readouterr()
    assert "gpu_xid" in out and "not stored in TRIAGE_DB" in err and "full" in err
    assert main(["report", "--out", str(tmp_path / "out")]) == 0
    assert main(["db", "backup", str(tmp_path / "copy.db")]) == 0
    assert sqlite3.connect(str(tmp_path / "copy.db")).execute("select count(*) from diagnoses").fetchone()[0] >= 1
