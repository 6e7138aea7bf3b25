"""The unexplained-error collector caches its verdict and template by line shape: the cache must never change the
answer, only skip work (issue 16: a flood of error lines that differ in ids and counters)."""
import json
import random

from conftest import FIXTURES, ROOT
from core.redact import mask_secrets
from core.templates import template
from parsers.scan.base import Context, Hit
from parsers.collectors.unclaimed import _BENIGN, _ERRORISH, UnclaimedCollector


def _collect(lines: list[str]) -> list[dict]:
    c = UnclaimedCollector()
    for no, line in enumerate(lines, 1):
        if any(t in line for t in c.triggers):
            c.feed(Hit(no, line))
    ctx = Context()
    c.collect(ctx)
    return ctx.error_lines


def _uncached(lines: list[str]) -> list[dict]:
    """The same rows with every line judged and templated on its own."""
    rows: dict[str, list] = {}
    for no, t in enumerate(lines, 1):
        if not any(x in t for x in UnclaimedCollector.triggers) or not _ERRORISH.search(t) or _BENIGN.search(t):
            continue
        key = template(mask_secrets(t))
        if key in rows:
            rows[key][0] += 1
        elif len(rows) < 300:
            rows[key] = [1, no, mask_secrets(t).strip()[:300]]
    out = [{"template": k, "count": c, "line": no, "example": ex} for k, (c, no, ex) in rows.items()]
    return sorted(out, key=lambda r: (-r["count"], r["line"]))


def _real_lines() -> list[str]:
    lines = []
    for path in sorted(FIXTURES.rglob("*.log")):
        lines += path.read_text(encoding="utf-8", errors="replace").splitlines()
    for path in sorted((ROOT / "tests" / "corpus").glob("*.jsonl")):
        for case in map(json.loads, filter(str.strip, path.read_text(encoding="utf-8").splitlines())):
            lines += case["text"].splitlines()
    return lines


def test_the_cache_gives_the_rows_of_judging_every_line_alone():
    lines = _real_lines()
    rnd = random.Random(5)
    variants = []   # the corpus's error lines again, with their numbers and hex ids changed
    for line in lines:
        if _ERRORISH.search(line):
            variants.append("".join(rnd.choice("0123456789") if ch.isdigit() else
                                    rnd.choice("abcdef") if ch in "abcdef" and rnd.random() < 0.3 else ch
                                    for ch in line))
    both = lines + variants
    assert len(variants) > 300
    assert _collect(both) == _uncached(both)


def test_a_flood_of_one_error_with_different_ids_is_one_row_counted_in_full():
    lines = [f"[rank{i % 512}]: RuntimeError: shard {i} failed to load from /fsx/ckpt/{i * 7919:08x}.bin after "
             f"{i % 7} tries" for i in range(3000)]
    rows = _collect(lines)
    assert [(r["count"], r["line"]) for r in rows] == [(3000, 1)]


def test_a_lone_zero_still_tells_a_clean_counter_from_a_failing_one():
    rows = _collect(["checkpoint shards failed: 0", "checkpoint shards failed: 10", "checkpoint shards failed: 0"])
    assert [(r["count"], r["line"]) for r in rows] == [(1, 2)]
    rows = _collect(["checkpoint shards failed: 7", "checkpoint shards failed: 0", "checkpoint shards failed: 3"])
    assert [(r["count"], r["line"]) for r in rows] == [(2, 1)]


def test_an_account_id_is_not_taken_for_a_hex_id_of_the_same_length():
    lines = ["AccessDenied: account 123456789012 failed to assume role", "AccessDenied: account 12345678901a failed "
             "to assume role", "AccessDenied: account 210987654321 failed to assume role"]
    rows = _collect(lines)
    assert rows == _uncached(lines) and len(rows) == 2
    assert "123456789012" not in json.dumps(rows) and "210987654321" not in json.dumps(rows)
