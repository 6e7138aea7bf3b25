"""Per-user request limit for the Slack entry points: N requests per window of seconds (sliding)."""
from __future__ import annotations

import threading
import time
from collections import deque


class RateLimiter:
    def __init__(self, limit: int, window: float, clock=time.monotonic):
        self.limit, self.window, self.clock = limit, window, clock
        self._seen: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    @classmethod
    def parse(cls, spec: str) -> "RateLimiter":
        n, _, w = spec.partition("/")
        return cls(int(n), float(w or 60))

    def allow(self, user: str) -> bool:
        now = self.clock()
        with self._lock:
            q = self._seen.setdefault(user, deque())
            while q and q[0] <= now - self.window:
                q.popleft()
            if len(q) >= self.limit:
                return False
            q.append(now)
            if len(self._seen) > 10000:  # forget idle users
                for u in [u for u, d in self._seen.items() if not d]:
                    del self._seen[u]
            return True

    def retry_after(self, user: str) -> int:
        q = self._seen.get(user)
        return max(1, int(q[0] + self.window - self.clock()) + 1) if q else 1

    def message(self, user: str) -> str:
        return (f":hourglass: You have sent {self.limit} requests in the last {int(self.window)} s, the limit for one "
                f"person. Try again in {self.retry_after(user)} s.")
