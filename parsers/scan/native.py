"""The native feeder (Polars, Rust): the same rows as parsers/scan/rows.py's pure-Python feeder, for large inputs, and
the lines that still have to be read one by one (a reader's trigger on them, no family of that reader selecting them).

A chunk becomes one string column (one row a line) only where that is exact: valid UTF-8, no \\x1f (the column
separator), no carriage return (a one-byte search: the two-byte one for CRLF took 7 ms of an 8 MiB chunk) and no
byte-order mark; otherwise, and when polars is missing, the caller uses the Python feeder
for that chunk (`frame` returns None)."""
from __future__ import annotations

from typing import Sequence

import polars as pl

from parsers.scan.rows import Family, Rows, State


def frame(buf: bytes) -> pl.DataFrame | None:
    """The chunk as column `l` (one row a line, "" for an empty one) with each line's byte offset in `at`."""
    if not buf or b"\x1f" in buf or b"\r" in buf or buf.startswith(b"\xef\xbb\xbf"):
        return None
    if not buf.isascii():
        try:
            buf.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        df = pl.read_csv(buf, has_header=False, separator="\x1f", quote_char=None, new_columns=["l"],
                         schema={"l": pl.String}, truncate_ragged_lines=True, raise_if_empty=False)
    except Exception:   # (whatever the CSV reader makes of it, the Python feeder reads it exactly)
        return None
    df = df.select(pl.col("l").fill_null(""))
    size = pl.col("l").str.len_bytes() + 1
    df = df.with_columns((size.cum_sum() - size).alias("at"))
    # every line and every byte, as the bytes hold them: a line dropped or cut short would leave the last line's end
    # short of the chunk's (a line split in two could only be at a carriage return: none is let in)
    if not df.height or int(df["at"][-1]) + len(df["l"][-1].encode()) != len(buf) - buf.endswith(b"\n"):
        return None
    return df


def _has(literals: Sequence[str]) -> pl.Expr:
    lits = sorted(set(literals))
    if not lits:
        return pl.lit(False)
    if len(lits) == 1:
        return pl.col("l").str.contains(lits[0], literal=True)
    return pl.col("l").str.contains_any(lits)


def rows(df: pl.DataFrame, families: Sequence[Family], first_no: int, state: State) -> list[Rows]:
    """Every family's rows, as rows.python_rows gives them. (One query a family, each collected on its own: collect_all
    hangs in a process forked after Polars started its threads, as `triage diagnose --jobs` forks.)"""
    queries = []
    for fam in families:
        cols = [pl.col("l").str.extract(p, 1).alias(n) for n, p in fam.fields]
        sub = df.lazy().with_row_index("i").filter(_has(fam.select))
        text = pl.col("l") if fam.text else (
            pl.when(pl.any_horizontal(*(pl.col(n).is_null() for n in fam.need))).then(pl.col("l"))
            if fam.need else pl.lit(None, pl.String))
        queries.append(sub.select("i", "l", *cols).select("i", *(n for n, _ in fam.fields), text.alias("text")))
    out = []
    for fam, got in zip(families, (q.collect() for q in queries)):
        got = _distinct(got, fam, state) if fam.distinct else got.with_columns(pl.lit(1, pl.Int64).alias("count"))
        out.append(Rows(fam, no=[first_no + 1 + i for i in got["i"].to_list()],
                        fields={n: got[n].to_list() for n, _ in fam.fields}, text=got["text"].to_list(),
                        count=got["count"].to_list()))
    return out


def _distinct(got: pl.DataFrame, fam: Family, state: State) -> pl.DataFrame:
    """Drop each row whose `distinct` fields are all set and equal to the previous row's; count them on the row
    kept before them (a copy of the previous chunk's last row is dropped uncounted), as rows.add_row does."""
    if not got.height:
        return got.with_columns(pl.lit(1, pl.Int64).alias("count"))
    last = state.last.get(fam.name)
    same = pl.lit(True)
    for j, k in enumerate(fam.distinct):
        prev = pl.col(k).shift(1)
        if last is not None:
            prev = prev.fill_null(pl.lit(last[j], pl.String)) if last[j] is not None else prev
        same = same & pl.col(k).is_not_null() & prev.is_not_null() & (pl.col(k) == prev)
    if last is None or None in last:
        same = same & (pl.int_range(pl.len()) > 0)
    got = got.with_columns(same.fill_null(False).alias("_copy"))
    got = got.with_columns((~pl.col("_copy")).cum_sum().alias("_g"))
    state.last[fam.name] = tuple(got.row(-1, named=True)[k] for k in fam.distinct)
    counts = got.group_by("_g", maintain_order=True).agg(pl.len().alias("count"))
    kept = got.filter(~pl.col("_copy")).join(counts, on="_g", how="left", maintain_order="left")
    return kept.drop("_copy", "_g").with_columns(pl.col("count").cast(pl.Int64))


def wanted(df: pl.DataFrame, plain: Sequence[str], owned: Sequence[tuple[Sequence[str], Sequence[str]]]) -> list[int]:
    """0-based indexes of the lines to read one by one: those holding a trigger of a reader without families
    (`plain`), or a trigger of a reader with families (`owned`: (its triggers, its families' selecting literals))
    where none of its selecting literals is. One pass over most lines; the family lines are grouped by which readers'
    families select them, and each group is tested once for the triggers of the other readers."""
    sel = [_has(s).alias(f"s{j}") for j, (_, s) in enumerate(owned)]
    bits = pl.sum_horizontal(*(pl.col(f"s{j}").cast(pl.Int64) * (1 << j) for j in range(len(owned)))) \
        if owned else pl.lit(0, pl.Int64)
    lf = df.lazy().with_row_index("i").with_columns(*sel).with_columns(bits.alias("bits"))
    combos = lf.select(pl.col("bits").unique()).collect()["bits"].to_list()
    parts = []
    for b in combos:
        lits = list(plain) + [t for j, (trig, _) in enumerate(owned) if not b >> j & 1 for t in trig]
        parts.append(lf.filter((pl.col("bits") == b) & _has(lits)).select("i"))
    if not parts:
        return []
    return sorted(pl.concat(pl.collect_all(parts)).get_column("i").to_list())
