"""Planted values for the governance tests: valid ones every detector must find, and
near-misses (failed checksum, wrong length, inside a longer digit run) none may find.

Importable by the integration tests too (``tests.unit.governance.planted``).
"""

from __future__ import annotations

import datetime as dt
import random
from collections.abc import Callable

from governance.detectors import luhn_valid, prc_id_check_character

_AREAS = ("110105", "310104", "440305", "510107", "330106")
_CARD_PREFIXES = ("622202", "621700", "436742", "524094", "356833", "601100")
_MOBILE_PREFIXES = ("13", "14", "15", "16", "17", "18", "19")
_DOMAINS = ("example.com", "mail.example.cn", "corp.example.org")


def prc_id(rng: random.Random) -> str:
    born = dt.date(1950, 1, 1) + dt.timedelta(days=rng.randrange(20_000))
    first17 = f"{rng.choice(_AREAS)}{born:%Y%m%d}{rng.randrange(1000):03d}"
    return first17 + prc_id_check_character(first17)


def prc_id_bad_check(rng: random.Random) -> str:
    good = prc_id(rng)
    wrong = next(c for c in "0123456789X" if c != good[-1])
    return good[:-1] + wrong


def prc_id_bad_date(rng: random.Random) -> str:
    first17 = f"{rng.choice(_AREAS)}19901332{rng.randrange(1000):03d}"  # month 13
    return first17 + prc_id_check_character(first17)


def bank_card(rng: random.Random, length: int | None = None) -> str:
    size = length or rng.choice((16, 16, 19, 17))
    body = rng.choice(_CARD_PREFIXES) + "".join(str(rng.randrange(10)) for _ in range(size - 7))
    return next(body + d for d in "0123456789" if luhn_valid(body + d))


def bank_card_bad_luhn(rng: random.Random) -> str:
    good = bank_card(rng)
    return good[:-1] + str((int(good[-1]) + rng.randrange(1, 10)) % 10)


def mobile(rng: random.Random) -> str:
    second = rng.choice("3456789")
    return "1" + second + "".join(str(rng.randrange(10)) for _ in range(9))


def email(rng: random.Random) -> str:
    local = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randrange(3, 10)))
    return f"{local}.{rng.randrange(1000)}@{rng.choice(_DOMAINS)}"


def ipv4(rng: random.Random) -> str:
    return ".".join(str(rng.randrange(1, 255)) for _ in range(4))


def ipv6(rng: random.Random) -> str:
    groups = [f"{rng.randrange(1, 0xFFFF):x}" for _ in range(8)]
    return ":".join(groups)


VALID = {
    "prc_id": prc_id,
    "bank_card": bank_card,
    "cn_mobile": mobile,
    "email": email,
    "ipv4": ipv4,
    "ipv6": ipv6,
}


def _not_a_card(make: Callable[[], str]) -> str:
    """A digit string that does not pass Luhn: a 17/18-digit near-miss ID that passes it
    would be a valid bank card number, which is no near miss."""
    while True:
        value = make()
        if not luhn_valid(value):
            return value


def near_misses(rng: random.Random) -> list[str]:
    """Strings that only look like sensitive values: none is a detection."""
    phone = mobile(rng)
    return [
        _not_a_card(lambda: prc_id_bad_check(rng)),
        _not_a_card(lambda: prc_id_bad_date(rng)),
        _not_a_card(lambda: prc_id(rng)[:17]),  # 17 characters
        bank_card_bad_luhn(rng),
        bank_card(rng)[:12],  # too short
        "1" + bank_card(rng, 19) + "7",  # inside a longer digit run (21 digits)
        "12" + phone[2:],  # 12x is no mobile prefix
        phone[:10],  # ten digits
        "9" + phone,  # twelve digits
        phone + "5",
        "user@@example.com",
        "user.@example.com",
        "no-at-sign.example.com",
        "256.1.1.1",
        "10.0.0",
        "1.2.3.4.5",
        "12:30:45",
        "::",
        "2026-11-22 10:00:00.123456",
        "order 1795333510000",  # a 13-digit epoch in ms is not a card
    ]
