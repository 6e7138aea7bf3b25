"""The runbook: Markdown pages under knowledge/, one section per `## Title {#id}` heading, cited as `page#id`.
Free-text questions are answered with SQLite FTS5 (through sqlite-utils) over the sections."""
from __future__ import annotations

import re
import sqlite3
import threading
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).parent
# Words that say nothing about the problem: left out of runbook searches so they do not pick sections by chance.
STOP_WORDS = frozenset("""a an and are as at be been but by can could do does did for from had has have how i if in
into is it its me my of on or our should so that the their them then there these this to using use used was we what
when where which who why will with would you your tell know check see get got help please any some about after
before while just still also only""".split())
_HEADING = re.compile(r"^(#{1,2}) (.+?) \{#([a-z0-9_-]+)\}\s*$")


@dataclass(frozen=True)
class Section:
    id: str          # "page#section"; a page's own intro is "page"
    title: str
    text: str


class Runbook:
    def __init__(self, sections: list[Section]):
        self.sections = {s.id: s for s in sections}
        self._db = None
        self._lock = threading.Lock()  # one in-memory index shared by the bot's worker threads

    def __contains__(self, cite: str) -> bool:
        return cite in self.sections

    def get(self, cite: str) -> Section:
        return self.sections[cite]

    def search(self, query: str, limit: int = 3) -> list[Section]:
        """Best sections for a free-text question; FTS syntax in the question is neutralised."""
        words = [w for w in dict.fromkeys(re.findall(r"[A-Za-z0-9_]+", query.lower())) if w not in STOP_WORDS]
        if not words:
            return []
        rows: list = []
        with self._lock:   # sections with every word first, then with any of them; BM25, titles weigh 5x
            for joiner in (" AND ", " OR "):
                q = joiner.join(f'"{w}"' for w in words)
                seen = {r["id"] for r in rows}
                rows += [r for r in self._index().query(
                    "select id from sections_fts join sections on sections.rowid = sections_fts.rowid "
                    "where sections_fts match ? order by bm25(sections_fts, 5.0, 1.0) limit ?", [q, limit])
                    if r["id"] not in seen]
                if len(rows) >= limit or len(words) == 1:
                    break
        ids = [r["id"] for r in rows]
        # A page's intro is an overview: when one of its own sections matched too, that section answers better.
        ranked = sorted(ids, key=lambda i: "#" not in i and any(j.startswith(i + "#") for j in ids))
        return [self.sections[i] for i in ranked[:limit]]

    def _index(self):
        if self._db is None:
            import sqlite_utils
            db = sqlite_utils.Database(sqlite3.connect(":memory:", check_same_thread=False))
            db["sections"].insert_all(({"id": s.id, "title": s.title, "text": s.text} for s in self.sections.values()),
                                      pk="id")
            db["sections"].enable_fts(["title", "text"], tokenize="porter")
            self._db = db
        return self._db


def parse_page(page: str, markdown: str) -> list[Section]:
    out: list[Section] = []
    cur_id, cur_title, buf = None, None, []

    def flush():
        if cur_id:
            out.append(Section(cur_id, cur_title, "\n".join(buf).strip()))

    for line in markdown.splitlines():
        m = _HEADING.match(line)
        if m:
            flush()
            level, title, anchor = m.groups()
            cur_id = page if level == "#" else f"{page}#{anchor}"
            cur_title, buf = title, []
        elif cur_id:
            buf.append(line)
    flush()
    return out


@lru_cache(maxsize=4)
def load(directory: str | None = None) -> Runbook:
    root = Path(directory) if directory else HERE
    sections: list[Section] = []
    for path in sorted(root.glob("*.md")):
        sections.extend(parse_page(path.stem, path.read_text(encoding="utf-8")))
    return Runbook(sections)


def sync_generated(directory: str | None = None) -> bool:
    """Rewrite the generated blocks of the runbook from their data (`make runbook`); True when a file changed."""
    from core.generated import replace_marked
    from core.versions import BEGIN, END, runbook_block
    return replace_marked((Path(directory) if directory else HERE) / "efa.md", BEGIN, END, runbook_block())
