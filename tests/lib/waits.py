"""Polling until a condition holds, and Failure: the exception of a check that failed.

    from waits import Failure, wait_for
    pods = wait_for("three Pods", lambda: len(pods()) == 3 and pods(), timeout=30)

A probe may raise Failure (or an API error, a KeyError...) to say what it saw
while the condition does not hold yet: wait_for retries, and names the last
thing seen when it gives up.
"""

import time

from kube import ApiError


class Failure(Exception):
    """A check failed; the message says what was expected and what was seen."""


def wait_for(what, probe, timeout=30.0, interval=0.25, retry=()):
    """Calls probe() until it returns a true value, and returns it; raises
    Failure naming `what` and the last thing seen (value or exception) on
    timeout. Exceptions of the `retry` types are retried too."""
    retried = (ApiError, Failure, KeyError, IndexError, TypeError, ValueError, *retry)
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            value = probe()
            if value:
                return value
            last = value
        except retried as e:
            last = f"{type(e).__name__}: {e}"
        if time.monotonic() > deadline:
            raise Failure(f"{what}: not true after {timeout:.0f}s (last seen: {str(last)[:600]})")
        time.sleep(interval)
