"""Retries where they help, never where they cost: every step retries a transient fault (the store, the
Hub or an API endpoint unreachable for a while) with backoff, and fails once on anything else (a budget
spent, a tampered artifact, a bad config, a crashed training run), so nothing is paid or trained twice
for a mistake. A step retried resumes: the teacher from its work file, the rest from what is published."""

from __future__ import annotations

from contextlib import contextmanager

import dagster as dg

from rhythm_core.errors import is_transient

# Long enough for a store or endpoint to come back (10 s, 20 s, 40 s), short enough to notice a real outage.
TRANSIENT_RETRY = dg.RetryPolicy(max_retries=3, delay=10, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)


@contextmanager
def retried_only_if_transient(passthrough: tuple[type[BaseException], ...] = ()):
    """Inside a step with `TRANSIENT_RETRY`: a fault `is_transient` names (itself or its cause) propagates and
    the policy retries it; any other error, a Failure included, fails once, its message and cause kept.
    `passthrough`: exceptions the step handles itself, left as they are."""
    try:
        yield
    except passthrough:
        raise
    except dg.Failure as failure:
        if not failure.allow_retries or is_transient(failure):
            raise
        raise dg.Failure(description=failure.description, metadata=failure.metadata, allow_retries=False) from failure
    except Exception as exc:
        if is_transient(exc):
            raise
        raise dg.Failure(description=f"{type(exc).__name__}: {exc}", allow_retries=False) from exc
