"""`python -m bot.cli`: the `triage` command."""
import sys

from bot.cli.entry import main

sys.exit(main())
