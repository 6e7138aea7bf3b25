"""Parsers, one module per symptom family: the registry (core.symptoms) lists the families, and the family stem
names the module `parsers.<family>` (a file `parsers/<family>.py`, or a package `parsers/<family>/` whose __init__ is
the family module once the family has grown several modules: slow, convergence), its playbook and its runbook page.
Each family module exposes PARSERS, its Parser classes; collectors (no symptoms) live in parsers.collectors, and the
reader contract with the scanner in parsers.scan."""
from importlib import import_module

from core.symptoms import FAMILIES
from parsers.collectors import COLLECTORS

PARSERS = tuple(cls for family in FAMILIES for cls in import_module(f"parsers.{family}").PARSERS)
# What the scanner feeds, in a fixed order: the context collector, the parsers, the other collectors.
READERS = (COLLECTORS[0], *PARSERS, *COLLECTORS[1:])

__all__ = ["COLLECTORS", "PARSERS", "READERS"]
