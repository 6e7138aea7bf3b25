"""The bot's own pool for heavy work (downloading and diagnosing), with a bounded queue: when it is full the asker is
told to retry in so many seconds instead of waiting minutes behind everyone else."""
from __future__ import annotations

import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

MAX_PENDING = 64     # jobs queued or running; past that new work is refused with a retry time


class WorkQueue:
    def __init__(self, workers: int = 2, max_pending: int | None = None):
        self.workers = workers
        self.max_pending = MAX_PENDING if max_pending is None else max_pending
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="triage-work")
        self._lock = threading.Lock()
        self.pending = 0
        self._avg_s = 2.0   # moving average of one job's duration, for the retry estimate

    def busy(self) -> bool:
        return self.pending >= self.max_pending

    def retry_after(self) -> int:
        """Seconds until a new job would likely start: the queue ahead of it over the workers."""
        return max(5, math.ceil(self.pending * self._avg_s / self.workers))

    def reserve(self) -> bool:
        """Hold a place for a job that will be submitted later (with reserved=True); False when the queue is full."""
        with self._lock:
            if self.pending >= self.max_pending:
                return False
            self.pending += 1
            return True

    def submit(self, job: Callable[[], None], reserved: bool = False) -> bool:
        """Queue the job unless the queue is full; False means refused (tell the asker). A job whose place was
        reserved is always taken."""
        if not reserved and not self.reserve():
            return False

        def run() -> None:
            t0 = time.monotonic()
            try:
                job()
            finally:
                with self._lock:
                    self.pending -= 1
                    self._avg_s = 0.8 * self._avg_s + 0.2 * (time.monotonic() - t0)
        self.pool.submit(run)
        return True

    def message(self) -> str:
        return (f":hourglass: Busy: {self.pending} diagnoses are ahead of this one. Please retry in about "
                f"{self.retry_after()} s.")
