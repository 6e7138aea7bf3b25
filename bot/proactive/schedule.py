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


_LONGEST = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30, 12: 31}


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
        # a date that no calendar has (31 February, 31 April) never fires: say so now, not when `serve` schedules it
        if not any(d <= _LONGEST[m] for m in self.month for d in self.day):
            raise CronError(f"'{expr}' names a day no month in it has: it would never fire")
        self.next_after(datetime(2000, 1, 1, tzinfo=self.tz))   # (and a weekday that never meets those dates)

    def next_after(self, now: datetime) -> datetime:
        """The first time after `now` the expression fires, looked for day by day (29 February comes every four
        years, so up to eight years ahead)."""
        start = now.astimezone(self.tz).replace(second=0, microsecond=0) + timedelta(minutes=1)
        day = start.replace(hour=0, minute=0)
        for _ in range(8 * 366 + 1):
            if day.month in self.month and day.day in self.day and (day.isoweekday() % 7) in self.weekday:
                for h in sorted(self.hour):
                    for m in sorted(self.minute):
                        t = day.replace(hour=h, minute=m)
                        if t >= start:
                            return t
            day = (day + timedelta(days=1)).replace(hour=0, minute=0)
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
