"""The `rhythm` command line: the commands (`commands.py`), each argument's check before any work
(`checks.py`) and argparse made to answer a mistake in one line (`parsing.py`)."""

from .commands import build_parser, main

__all__ = ["build_parser", "main"]
