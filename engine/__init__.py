"""The diagnosis pipeline, below the adapters in bot/: bytes in, a Diagnosis out (ingest → collectors and parsers →
root cause → playbooks). Pure domain code: it reads no environment; settings come in as arguments."""
from engine.pipeline import Engine

__all__ = ["Engine"]
