"""The shared labelled corpus of real public log excerpts (kept outside the project) must score >= 95% top-1
with no finding on any healthy case."""
from pathlib import Path

import pytest

from bot.evaluate import evaluate

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus" / "dev.jsonl"


@pytest.mark.skipif(not CORPUS.exists(), reason="shared corpus not checked out beside the project")
def test_dev_corpus_top1_and_no_false_findings(engine):
    sc = evaluate(CORPUS.read_text(encoding="utf-8").splitlines(), engine)
    assert sc.total >= 40
    assert sc.accuracy >= 0.95, sc.wrong
    assert sc.none_with_findings == 0
