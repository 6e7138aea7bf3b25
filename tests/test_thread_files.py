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
    h.fake.wait(lambda: any(p.get("name") in ("white_check_mark", "exclamation")
                            for p in h.fake.called("reactions.add")), timeout=120)


def _mine(wait: float = 10.0) -> list[str]:
    """This process's spools left on disk, once the answer's last step (after the reaction) had time to run."""
    deadline = time.monotonic() + wait
    while True:
        left = glob.glob(os.path.join(tempfile.gettempdir(), f"triage-thread-{os.getpid()}-*"))
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.05)


def test_six_large_files_are_read_from_disk_one_at_a_time(slack_bot):
    h = slack_bot()
    files = [(f"node{i}.log", FILLER + (HANG if i == 5 else b"")) for i in range(6)]   # ~33 MiB in all
    tracemalloc.start()
    try:
        _thread(h, "31.1", files)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    posts = [p for p in h.fake.called("chat.postMessage") if p.get("blocks")]
    assert len(posts) == 6 and any("nccl_timeout" in str(p["blocks"]) for p in posts)
    assert peak < 16 << 20, f"peak {peak >> 20} MiB: the files were held in memory"
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
