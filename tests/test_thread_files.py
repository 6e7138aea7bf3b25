"""A thread's files are streamed to disk one at a time within a byte budget per thread (issue 31, item 13): six
large attachments never sit in memory together, the budget cuts and skips with a note, and nothing stays on disk."""
import glob
import os
import tempfile
import time
import tracemalloc

from conftest import FIXTURES

HANG = (FIXTURES / "nccl_timeout" / "lagging_rank.log").read_bytes()
FILLER = b"".join(b"[rank%d]: iteration %d/ 100000 | consumed samples: 512 | elapsed time per iteration (ms): 812.4\n"
                  % (i % 8, i) for i in range(60000))   # ~5.5 MiB of ordinary iteration lines


def _thread(h, ts, files):
    msgs = [{"user": "U1", "ts": ts, "text": "<@UBOT> please look", "files": [
        {"id": f"F{i}", "name": name, "mimetype": "text/plain", "size": len(data),
         "url_private_download": h.fake.add_file(name, data)} for i, (name, data) in enumerate(files)]}]
    h.fake.threads[("C1", ts)] = msgs
    h.event({"type": "app_mention", "user": "U1", "text": "<@UBOT> please look", "ts": ts, "channel": "C1"},
            f"Ev{ts}")
    h.fake.wait(lambda: any(p.get("name") in ("white_check_mark", "exclamation") and p.get("timestamp") == ts
                            for p in h.fake.called("reactions.add")), timeout=120)


def _mine(wait: float = 10.0) -> list[str]:
    """This process's spools left on disk, once the answer's last step (after the reaction) had time to run."""
    deadline = time.monotonic() + wait
    while True:
        left = glob.glob(os.path.join(tempfile.gettempdir(), f"triage-thread-{os.getpid()}-*"))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def _peak(h, ts, files) -> int:
    tracemalloc.start()
    try:
        _thread(h, ts, files)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_six_large_files_are_read_from_disk_one_at_a_time(slack_bot):
    h = slack_bot()
    one = _peak(h, "30.1", [("node0.log", FILLER)])
    files = [(f"node{i}.log", FILLER + (HANG if i == 5 else b"")) for i in range(6)]   # ~33 MiB in all
    six = _peak(h, "31.1", files)
    posts = [p for p in h.fake.called("chat.postMessage") if p.get("blocks")]
    assert len(posts) == 7 and any("nccl_timeout" in str(p["blocks"]) for p in posts)
    # six files cost what one does: held in memory together they would add ~28 MiB to one file's peak
    assert six < one * 1.5 + (4 << 20), f"peak {six >> 20} MiB for six files, {one >> 20} MiB for one"
    assert not _mine()   # the spool is removed once the thread is answered


def test_the_threads_budget_cuts_then_skips_with_a_note(slack_bot):
    h = slack_bot(TRIAGE_MAX_THREAD_BYTES=str(3 << 20))
    two = FILLER[: 2 << 20]
    _thread(h, "32.1", [("a.log", two), ("b.log", two), ("c.log", two)])
    notes = " ".join(p.get("text") or "" for p in h.fake.called("chat.postMessage") if p.get("text", "").startswith("Notes"))
    assert "`b.log` is 2 MiB; only the first 1 MiB were read" in notes
    assert "skipped `c.log`: this thread's files already used the 3 MiB read per thread" in notes
    posts = [p for p in h.fake.called("chat.postMessage") if p.get("blocks")]
    assert len(posts) == 2   # a.log whole, b.log cut at the budget; c.log never downloaded
    assert "/files/c.log" not in str(h.fake.called("upload")) and not _mine()
