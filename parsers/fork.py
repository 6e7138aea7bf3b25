"""fork_enomem: os.fork() fails with ENOMEM when DataLoader workers start (huge pages pinned by EFA)."""
from __future__ import annotations

from core.models import Finding
from parsers.base import Context, EvidenceBox, Hit, Parser, rx, search

_ENOMEM = rx(r"(?:OSError|BlockingIOError|RuntimeError)?:? ?\[Errno 12\] Cannot allocate memory")
_FORK = rx(r"os\.fork\(\)|\bfork\(\)|_launch|popen_fork|DataLoader worker|multiprocessing|_MultiProcessingDataLoaderIter")


class ForkParser(Parser):
    name = "fork_enomem"
    triggers = ("[Errno 12]", "os.fork()", "popen_fork")
    before = 6
    after = 2

    def __init__(self) -> None:
        self.ev = EvidenceBox()
        self.count = 0
        self.fork_seen = False

    def feed(self, hit: Hit) -> None:
        if search(_ENOMEM, hit.text):
            self.count += 1
            self.ev.add(hit.no, hit.text)
            if any(search(_FORK, x) for x in (*hit.before, *hit.after)):
                self.fork_seen = True
        elif search(_FORK, hit.text):
            self.fork_seen = True

    def finish(self, ctx: Context) -> list[Finding]:
        if not self.count:
            return []
        title = (f"os.fork() failed with ENOMEM ({self.count}x): worker processes (DataLoader) could not start"
                 if self.fork_seen else f"A process failed with ENOMEM ({self.count}x); likely fork() in worker start-up")
        return [Finding(symptom="fork_enomem", rule="fork_enomem.fork" if self.fork_seen else "fork_enomem.enomem",
                        title=title, severity="critical", confidence=0.9 if self.fork_seen else 0.6,
                        evidence=self.ev.items, facts={"count": self.count, "fork_seen": self.fork_seen},
                        first_line=self.ev.first())]


PARSER = ForkParser
