"""A replacement `triage serve` resumes what a killed one left while the other replica keeps writing to the
database (bench/soak.py found it failing to start: 'database is locked' in Journal.orphans). Each orphan is claimed
in a write; inside a still-open SELECT that write fails at once, busy_timeout or not, when another process wrote
since the SELECT began, so the rows are read first."""
import os


def test_orphans_are_claimed_while_another_process_writes(tmp_path, monkeypatch):
    from bot.store import journal
    from bot.store.store import Store
    path = tmp_path / "t.db"
    store, other = Store(path), Store(path)   # two connections: this process, and the replica still serving
    first = journal.Journal(store)
    for ts in ("1.1", "1.2", "1.3"):
        first.begin("on_mention", {"event": {"ts": ts, "channel": "C1"}})
    with store.write() as db:   # their process died (no such pid)
        db.execute("update work set owner = ?", [f"{journal.HOST}:999999999:dead"])

    def dead_while_the_other_writes(owner, me):
        with other.write() as db:
            db.execute("insert into events (event_id, at) values (?, ?)", [os.urandom(4).hex(), "now"])
        return False
    monkeypatch.setattr(journal, "_alive", dead_while_the_other_writes)
    taken = journal.Journal(store).orphans()
    assert [r["request"]["event"]["ts"] for r in taken] == ["1.1", "1.2", "1.3"]
