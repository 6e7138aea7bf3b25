"""When to post the weekly report: a five-field cron expression (minute hour day month weekday) in a time zone.
Weekday 0 or 7 is Sunday, 1 is Monday."""
from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Callable
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

log = logging.getLogger("triage.schedule")
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))


class CronError(ValueError):
    pass


def _field(text: str, lo: int, hi: int) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        body, _, step = part.partition("/")
        stride = int(step) if step else 1
        if body == "*":
            a, b = lo, hi
        elif "-" in body:
            a, b = (int(x) for x in body.split("-", 1))
        else:
            a = b = int(body)
        if not (lo <= a <= hi and lo <= b <= hi) or stride < 1:
            raise CronError(f"'{part}' is outside {lo}-{hi}")
        out.update(range(a, b + 1, stride))
    return out


class Cron:
    def __init__(self, expr: str, tz: str = "UTC"):
        parts = expr.split()
        if len(parts) != 5:
            raise CronError(f"'{expr}' needs five fields: minute hour day month weekday")
        try:
            self.minute, self.hour, self.day, self.month, dow = (_field(p, lo, hi) for p, (lo, hi) in zip(parts, _RANGES))
            self.tz = ZoneInfo(tz)
        except (ZoneInfoNotFoundError, OSError):   # OSError: a directory such as "America", an over-long name
            raise CronError(f"unknown time zone '{tz}'") from None
        except ValueError as e:
            raise CronError(str(e)) from None
        self.weekday = {d % 7 for d in dow}  # cron: 0=Sunday

    def next_after(self, now: datetime) -> datetime:
        t = now.astimezone(self.tz).replace(second=0, microsecond=0) + timedelta(minutes=1)
        for _ in range(366 * 24 * 60):
            if (t.month in self.month and t.day in self.day and (t.isoweekday() % 7) in self.weekday
                    and t.hour in self.hour and t.minute in self.minute):
                return t
            t += timedelta(minutes=1)
        raise CronError("the expression never fires")


class Scheduler:
    """Runs `job` once each time the cron expression comes due. `tick(now)` is the whole logic (tested directly);
    `start()` calls it from a daemon thread."""

    def __init__(self, cron: Cron, job: Callable[[], None], now: datetime):
        self.cron = cron
        self.job = job
        self.due = cron.next_after(now)
        self._stop = threading.Event()

    def tick(self, now: datetime) -> bool:
        if now < self.due:
            return False
        self.due = self.cron.next_after(now)
        try:
            self.job()
        except Exception as e:  # a failed post must not kill the schedule
            log.error("scheduled report failed: %s", type(e).__name__)
        return True

    def start(self, clock: Callable[[], datetime]) -> threading.Thread:
        def loop():
            while not self._stop.wait(30):
                self.tick(clock())
        th = threading.Thread(target=loop, name="report-schedule", daemon=True)
        th.start()
        return th

    def stop(self) -> None:
        self._stop.set()
