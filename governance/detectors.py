"""Plaintext detectors: a regex finds candidates, a validator confirms each one. Pure logic.

Built-in detectors (``model.BUILTIN_DETECTORS``, in priority order):

- ``prc_id``: PRC resident ID numbers, 18 characters, a valid birth date (1900–2099) and the
  ISO 7064 MOD 11-2 check character;
- ``bank_card``: 13–19 digits (or groups of four separated by one space or dash) starting
  with 2–6 (the issuer ranges of the card schemes), passing the Luhn check, not all zeros;
- ``cn_mobile``: mainland-China mobile numbers, ``1[3-9]`` and nine more digits (optionally
  ``+86``/``86`` before, or written 3-4-4 with spaces or dashes);
- ``email``: ``local@domain.tld``, validated (no leading/trailing/double dots, labels);
- ``ipv4``/``ipv6``: validated with ``ipaddress`` (no leading zeros; ``::`` alone is not one).

A match inside a longer run of digits is never a detection (lookarounds), and when two
detectors match overlapping text the one earlier in the priority order wins.

Cost: each built-in detector runs only on text that passes its gate, a C-level search: eight
digits with at most one space or dash among them (ID, card, phone), ``d.ddd.d`` (IPv4),
``@`` (e-mail), ``x:x`` (IPv6). Text that cannot match costs about a microsecond.
User rules run their own regex on every scanned string: give them a literal to anchor on.

Length: ``scan`` reads at most ``max_chars`` characters of a value (``DEFAULT_MAX_CHARS``,
64 Ki): a longer value is scanned in its first ``max_chars`` characters only, and counted in
``DetectorSet.truncated``. A user rule that needs a lookaround runs on Python's ``re``, about
a microsecond per character at most (``simple_binlog.patterns``), so one value costs at most
a few hundred milliseconds.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cdc_platform.governance_model import BUILTIN_DETECTORS, DetectorRule
from simple_binlog.patterns import compile_pattern

if TYPE_CHECKING:
    from governance.functions import FunctionRegistry
    from simple_binlog.patterns import Matcher

Validator = Callable[[str], bool]

DEFAULT_MAX_CHARS = 65_536  # characters of one value a DetectorSet scans

# -- validators (pure) ---------------------------------------------------------------------

_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_ID_CHECK = "10X98765432"


def prc_id_check_character(first17: str) -> str:
    """The ISO 7064 MOD 11-2 check character of the first 17 digits of a PRC ID."""
    total = sum(int(digit) * weight for digit, weight in zip(first17, _ID_WEIGHTS, strict=True))
    return _ID_CHECK[total % 11]


def prc_id_valid(text: str) -> bool:
    """18 characters, 17 digits and a check character (digit or X), a real birth date."""
    if len(text) != 18 or not text[:17].isdigit() or text[17] not in "0123456789Xx":
        return False
    try:
        born = dt.date(int(text[6:10]), int(text[10:12]), int(text[12:14]))
    except ValueError:
        return False
    if not 1900 <= born.year <= 2099:
        return False
    return prc_id_check_character(text[:17]) == text[17].upper()


def luhn_valid(text: str) -> bool:
    """The Luhn check of a card number; spaces and dashes between digits are ignored."""
    digits = text.replace(" ", "").replace("-", "")
    if not digits.isdigit() or not 13 <= len(digits) <= 19 or digits.count("0") == len(digits):
        return False
    total = 0
    for index, char in enumerate(reversed(digits)):
        value = ord(char) - 48
        if index % 2:
            value *= 2
            if value > 9:
                value -= 9
        total += value
    return total % 10 == 0


def ipv4_valid(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def ipv6_valid(text: str) -> bool:
    if text.strip(":") == "":
        return False  # '::' alone: the unspecified address, and what any 'a::b' text leaves
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def ip_valid(text: str) -> bool:
    return ipv4_valid(text) or ipv6_valid(text)


_LABEL = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def email_valid(text: str) -> bool:
    local, at, domain = text.rpartition("@")
    if not at or not local or len(local) > 64 or len(domain) > 253:
        return False
    if local.startswith(".") or local.endswith(".") or ".." in local:
        return False
    labels = domain.split(".")
    return (
        len(labels) >= 2 and all(_LABEL.match(label) for label in labels) and (labels[-1].isalpha())
    )


BUILTIN_VALIDATOR_FUNCTIONS: dict[str, Validator] = {
    "luhn": luhn_valid,
    "prc_id": prc_id_valid,
    "ipv4": ipv4_valid,
    "ipv6": ipv6_valid,
    "ip": ip_valid,
    "email": email_valid,
}


# -- detectors -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Detection:
    """One detected span of a string (``text[start:end]``); never leaves the process."""

    detector: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class RegexDetector:
    name: str
    pattern: Matcher  # a user rule's on RE2 (``simple_binlog.patterns``)
    validator: Validator | None
    # What the text must hold before the regex runs: a substring or a cheap regex (None: the
    # regex always runs).
    gate: re.Pattern[str] | str | None = None

    def find(self, text: str) -> list[Detection]:
        found = []
        for match in self.pattern.finditer(text):
            candidate = match.group()
            if self.validator is None or self.validator(candidate):
                found.append(Detection(self.name, match.start(), match.end()))
        return found


# Gates: a cheap C-level search a string must pass before a detector's regex runs. Card,
# ID and phone numbers all hold eight digits with at most one space or dash among them.
_LONG_NUMBER = re.compile(r"[0-9](?:[0-9]{3}[ -]?[0-9]{4})")
_DOTTED_QUAD = re.compile(r"[0-9]\.[0-9]{1,3}\.[0-9]")
# Every regex gate at once: the one search most strings (no long number, no dotted quad) need.
_NUMBER_GATES = re.compile(r"[0-9](?:[0-9]{3}[ -]?[0-9]{4}|\.[0-9]{1,3}\.[0-9])")

# Each pattern starts with a single character class and puts its lookbehind after it, so re
# scans for that first character at C speed (a leading lookaround or a repeated class turns
# the scan off and costs a match attempt at every position). [0-9], not \d: \d also matches
# other scripts' digits, which int() would accept but no checksum was meant for.
_BUILTIN_PATTERNS: dict[str, tuple[str, Validator | None, re.Pattern[str] | str]] = {
    "prc_id": (
        r"[1-9](?<![0-9][1-9])[0-9]{5}(?:19|20)[0-9]{2}(?:0[1-9]|1[0-2])"
        r"(?:0[1-9]|[12][0-9]|3[01])[0-9]{3}[0-9Xx](?![0-9Xx])",
        prc_id_valid,
        _LONG_NUMBER,
    ),
    "bank_card": (
        r"[2-6](?<![0-9][2-6])(?:[0-9]{12,18}|[0-9]{3}(?:[ -][0-9]{4}){2,3}(?:[ -]?[0-9]{1,3})?)"
        r"(?![0-9Xx])",  # 17 digits and an X: an ID number (maybe a wrong one), not a card
        luhn_valid,
        _LONG_NUMBER,
    ),
    "cn_mobile": (
        r"[+1](?:(?<=\+)86[ -]?1|(?<![0-9]1))[3-9][0-9](?:[0-9]{8}|[ -][0-9]{4}[ -][0-9]{4})"
        r"(?![0-9])",
        None,
        _LONG_NUMBER,
    ),
    # Tried only where a local part can start (the lookbehind), so a long word without '@'
    # is read once, not once per character.
    "email": (
        r"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}"
        r"(?:\.[A-Za-z0-9-]{1,63}){1,8}",
        email_valid,
        "@",
    ),
    "ipv4": (
        r"[0-9](?<![0-9.][0-9])[0-9]{0,2}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}(?!\.?[0-9])",
        ipv4_valid,
        _DOTTED_QUAD,
    ),
    "ipv6": (
        r"(?<![0-9A-Fa-f:])(?:[0-9A-Fa-f]{1,4}|:)(?::[0-9A-Fa-f]{0,4}){2,7}"
        r"(?:(?<=:)[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3})?(?![0-9A-Fa-f:.])",
        ipv6_valid,
        ":",
    ),
}


def _builtin(name: str) -> RegexDetector:
    pattern, validator, gate = _BUILTIN_PATTERNS[name]
    return RegexDetector(name, re.compile(pattern), validator, gate)


def _user(rule: DetectorRule, functions: FunctionRegistry) -> RegexDetector:
    validator: Validator | None = None
    if rule.validator is not None:
        validator = functions.validator(rule.validator, f"validator of detector {rule.name!r}")
    return RegexDetector(rule.name, compile_pattern(rule.pattern), validator)


class DetectorSet:
    """The enabled detectors, compiled once; ``scan`` gives the detections of one string."""

    def __init__(
        self, detectors: Sequence[RegexDetector], max_chars: int = DEFAULT_MAX_CHARS
    ) -> None:
        self.detectors = tuple(detectors)
        self.max_chars = max_chars
        self.truncated = 0  # values longer than max_chars, scanned in their first max_chars
        self.names = tuple(d.name for d in self.detectors)
        # Detectors grouped by gate, each gate tested once per string; the regex gates only
        # after their union matched.
        groups: dict[re.Pattern[str] | str | None, list[RegexDetector]] = {}
        for detector in self.detectors:
            groups.setdefault(detector.gate, []).append(detector)
        self._by_pattern = tuple(
            (gate, tuple(members))
            for gate, members in groups.items()
            if isinstance(gate, re.Pattern)
        )
        self._by_substring = tuple(
            (gate, tuple(members)) for gate, members in groups.items() if isinstance(gate, str)
        )
        self._always = tuple(groups.get(None, ()))
        self._priority = {name: index for index, name in enumerate(self.names)}

    @classmethod
    def build(
        cls,
        builtin: Sequence[str],
        rules: Sequence[DetectorRule],
        functions: FunctionRegistry | None = None,
        max_chars: int = DEFAULT_MAX_CHARS,
    ) -> DetectorSet:
        """Built-ins in their priority order, then the enabled user rules in list order.

        ``functions`` resolves the rules' validators (default: the built-ins only); a
        ConfigError with one sentence when one is not allowed or cannot be imported.
        """
        if functions is None:
            # Imported here: the registry holds this module's built-in validators.
            from governance.functions import FunctionRegistry  # noqa: PLC0415

            functions = FunctionRegistry()
        chosen = [_builtin(name) for name in BUILTIN_DETECTORS if name in builtin]
        chosen += [_user(rule, functions) for rule in rules if rule.enabled]
        return cls(chosen, max_chars)

    def scan(self, text: str) -> list[Detection]:
        """The detections in ``text``, overlaps resolved by priority, in text order; of its
        first ``max_chars`` characters when it is longer (counted in ``truncated``)."""
        if len(text) > self.max_chars:
            text = text[: self.max_chars]
            self.truncated += 1
        found: list[Detection] = []
        if self._by_pattern and _NUMBER_GATES.search(text) is not None:
            for pattern, members in self._by_pattern:
                if pattern.search(text) is not None:
                    for detector in members:
                        found += detector.find(text)
        for substring, members in self._by_substring:
            if substring in text:
                for detector in members:
                    found += detector.find(text)
        for detector in self._always:
            found += detector.find(text)
        if len(found) > 1:
            found = self._resolve(found)
        return found

    def _resolve(self, found: list[Detection]) -> list[Detection]:
        kept: list[Detection] = []
        for detection in sorted(found, key=lambda d: (self._priority[d.detector], d.start)):
            if all(detection.end <= k.start or detection.start >= k.end for k in kept):
                kept.append(detection)
        return sorted(kept, key=lambda d: d.start)
