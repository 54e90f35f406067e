"""Narrowing for what the tests read: each call checks that a value is what the test expects
and gives it back as that type, so that the type checker follows the test and a value of the
wrong type fails it with a message that says what came instead."""

from __future__ import annotations

from typing import TypeVar

T = TypeVar("T")


def narrow(value: object, cls: type[T]) -> T:
    """``value``, checked to be a ``cls``."""
    if not isinstance(value, cls):
        raise AssertionError(f"expected {cls.__name__}, got {type(value).__name__}: {value!r:.300}")
    return value


def present(value: T | None) -> T:
    """``value``, checked not to be None."""
    if value is None:
        raise AssertionError("expected a value, got None")
    return value
