"""What the engine accepts from its callers, for adapters (bot/) to check settings against without reaching into
parsers/: the parsers' option types (instances of these go to Engine(options=…)), the parser for their
"key=value,…" spelling, and the scanner backends Engine(backend=…) takes."""
from __future__ import annotations

from parsers.convergence import LossParser
from parsers.scan.backends import BACKENDS
from parsers.scan.base import parse_options

LOSS_OPTIONS = LossParser.Options   # the loss parser's spike thresholds (TRIAGE_LOSS_SPIKE)
OPTION_TYPES = (LOSS_OPTIONS,)      # every parser Options type the engine hands on to its parser

__all__ = ["BACKENDS", "LOSS_OPTIONS", "OPTION_TYPES", "parse_options"]
