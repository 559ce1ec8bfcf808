"""One wall-clock deadline over a blocking call that cannot be given one (issue 29).

A client's `timeout` is a limit per read: a server that sends its answer one byte a second never
trips it, and holds the call for as long as it likes. kb/fetch.py keeps papers to one deadline by
owning its sockets; a model call goes through litellm and its providers' HTTP clients, whose sockets
are out of reach, so the deadline is kept from outside:

- in the main thread (the CLI, the runner), an interval timer (SIGALRM) raises `DeadlinePassed` in
  the blocked call. It derives from BaseException, as KeyboardInterrupt does, so the libraries'
  `except Exception` handlers let it through, and their `finally` blocks close the connection;
- elsewhere (a thread: signals reach only the main one), the call runs in a daemon thread that is
  left behind when the deadline passes (it ends with its connection; the caller does not wait).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from typing import Any, TypeVar

R = TypeVar("R")


class DeadlinePassed(BaseException):
    """The deadline passed before the call returned."""


def within(seconds: float, call: Callable[[], R]) -> R:
    """`call()`, or DeadlinePassed once `seconds` have passed (wall clock, from now)."""
    if seconds <= 0:
        raise DeadlinePassed
    if threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer"):
        return _with_timer(seconds, call)
    return _in_thread(seconds, call)


def _with_timer(seconds: float, call: Callable[[], R]) -> R:
    def expire(_signum: int, _frame: Any) -> None:
        raise DeadlinePassed

    previous = signal.signal(signal.SIGALRM, expire)
    try:
        signal.setitimer(signal.ITIMER_REAL, seconds)
        try:
            return call()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    finally:
        signal.signal(signal.SIGALRM, previous)


def _in_thread(seconds: float, call: Callable[[], R]) -> R:
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    worker = threading.Thread(target=run, name="deadline-call", daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        raise DeadlinePassed
    if "error" in box:
        raise box["error"]
    value: R = box["value"]
    return value
