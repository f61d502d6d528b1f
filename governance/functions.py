"""Which code a policy set may run: the product's fixed registry, and this host's allow-list.

A detector rule's ``validator`` and a recrypt rule's ``function`` are names, and a policy set
is configuration that the web admin serves to every collector: it must never make a host run
code its operator did not choose. A name resolves to a built-in validator
(``BUILTIN_VALIDATOR_FUNCTIONS``; there are no built-in recrypt functions), or to a
``pkg.module:function`` listed in ``governance.allowed_functions`` of the config file of the
process that resolves it. Anything else is refused with one sentence before any import: the
web admin refuses it when a rule is saved (its own config's list), and each collector or
replay again when it loads the set (its own list).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable

from governance.detectors import BUILTIN_VALIDATOR_FUNCTIONS, Validator
from simple_binlog.errors import ConfigError

Function = Callable[..., object]


class FunctionNotAllowedError(ConfigError, ValueError):
    """A policy set names code that is neither built in nor allowed by this host's config."""


class FunctionRegistry:
    """The built-in validators plus the plug-ins this host's config file allows."""

    def __init__(self, allowed: Iterable[str] = ()) -> None:
        self._allowed = frozenset(allowed)

    def check_validator(self, name: str) -> None:
        """Raise FunctionNotAllowedError unless ``name`` may be a detector's validator."""
        if name not in BUILTIN_VALIDATOR_FUNCTIONS and name not in self._allowed:
            raise FunctionNotAllowedError(
                f"{name!r} is not allowed: name a built-in validator "
                f"({', '.join(BUILTIN_VALIDATOR_FUNCTIONS)}) or a function that "
                "governance.allowed_functions lists in the host's own config file"
            )

    def check_transform(self, name: str) -> None:
        """Raise FunctionNotAllowedError unless ``name`` may be a recrypt rule's function."""
        if name not in self._allowed:
            raise FunctionNotAllowedError(
                f"{name!r} is not allowed: a recrypt function must be listed in "
                "governance.allowed_functions of the host's own config file"
            )

    def validator(self, name: str, what: str) -> Validator:
        """The validator ``name``; ConfigError naming ``what`` when refused or unloadable."""
        builtin = BUILTIN_VALIDATOR_FUNCTIONS.get(name)
        if builtin is not None:
            return builtin
        self._checked(self.check_validator, name, what)
        loaded = _load(name, what)
        return lambda text: bool(loaded(text))

    def transform(self, name: str, what: str) -> Function:
        """The recrypt function ``name``; ConfigError naming ``what`` when refused."""
        self._checked(self.check_transform, name, what)
        return _load(name, what)

    @staticmethod
    def _checked(check: Callable[[str], None], name: str, what: str) -> None:
        try:
            check(name)
        except FunctionNotAllowedError as exc:
            raise FunctionNotAllowedError(f"the {what}: {exc}.") from None


def _load(dotted: str, what: str) -> Function:
    """Import an allowed ``pkg.module:function``; ConfigError with one sentence on failure."""
    module_name, _, attribute = dotted.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"the {what} {dotted!r} cannot be imported ({exc}).") from None
    function = getattr(module, attribute, None)
    if not callable(function):
        raise ConfigError(f"the {what} {dotted!r} is not a function of {module_name}.")
    return function  # type: ignore[no-any-return]
