"""The mistakes a user can make, as exception classes: `rhythm` prints their message on one line and
exits 2 (no traceback unless `--debug` or RHYTHM_DEBUG=1); anything else is a bug and keeps its
traceback."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in what the user asked for: an argument, an input file, an output path, a key."""


class BadInput(UserError, ValueError):
    """An input that cannot be used as given; the message names the argument or file."""
