"""Plug-ins named by dotted path in the governance tests (recrypt functions, validators)."""

from __future__ import annotations


def old_to_new(value: object) -> object:
    """'old:<text>' ciphertext of the old scheme → 'new:<reversed text>'; others unchanged."""
    if isinstance(value, str) and value.startswith("old:"):
        return "new:" + value[4:][::-1]
    return value


def broken(value: object) -> object:
    raise ValueError("cannot decrypt")


def returns_list(value: object) -> object:
    return [value]


def is_order_code(text: str) -> bool:
    """Order codes ORD-<6 digits> whose digit sum is even."""
    return sum(int(c) for c in text[4:]) % 2 == 0


NOT_CALLABLE = 42
