import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).resolve().parent / "fixtures"
sys.path.insert(0, str(ROOT))


@pytest.fixture(scope="session")
def books():
    from playbooks.engine import load
    return load()


@pytest.fixture
def run(books):
    """Diagnose text (or bytes) with the real engine."""
    from bot.engine import diagnose
    from core.ingest import from_bytes

    def _run(text, name="paste"):
        data = text.encode() if isinstance(text, str) else text
        return diagnose(from_bytes(data, name), books)
    return _run
