"""Regexes an admin or a config file supplies: the one check of their cost, and their engine.

Every such pattern (governance detector rules, shard rules, collector include/exclude
filters) is checked by ``check_pattern`` where it enters (pydantic validators: the config file,
the web admin's API and forms, a config the collector receives) and compiled with
``compile_pattern`` where it runs.

Python runs them on RE2 (``google-re2``), whose time is linear in the text. Shard rules also
run in Spark (``stream_writer.transform``), on Java's backtracking engine, and a pattern that
RE2 cannot compile (a lookaround) runs on Python's ``re``; so the check bounds the cost a
backtracking engine can have, by the parsed pattern:

- an unbounded repeat (``*``, ``+``, ``{n,}``) must repeat something that matches in one way
  only: ``(a+)+``, ``(a|aa)*``, ``(a?)*`` are refused (exponential on a backtracking engine);
- a repeated group must not hold an unbounded repeat (``(a+){2,9}``);
- the ways the bounded parts can match, multiplied out, stay under ``MAX_PATHS``
  (``(a?){25}`` has 2**25), and at most ``MAX_UNBOUNDED`` unbounded repeats (each a factor of
  the text's length: shard names are at most 64 characters);
- no backreferences; a pattern RE2 cannot compile must bound every repeat, so each start
  position costs at most ``MAX_PATHS`` tries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from re import _parser  # type: ignore[attr-defined]  # Python's own parse of a pattern
from typing import TYPE_CHECKING, Any, TypeAlias

import re2

from simple_binlog.errors import ConfigError

MAX_PATHS = 10_000
MAX_UNBOUNDED = 3

if TYPE_CHECKING:  # re2's pattern class is generic in its stubs only
    Matcher: TypeAlias = re2._Regexp[str] | re.Pattern[str]


class UnsafePatternError(ConfigError, ValueError):
    """A pattern that is invalid or may cost too much; a ValueError for pydantic validators."""


@dataclass(frozen=True, slots=True)
class _Cost:
    paths: int  # ways the bounded parts can match (capped just above MAX_PATHS)
    unbounded: int  # unbounded repeats


def _sequence(items: Any) -> _Cost:
    paths, unbounded = 1, 0
    for op, av in items:
        cost = _item(op, av)
        paths = min(paths * cost.paths, MAX_PATHS + 1)
        unbounded += cost.unbounded
    return _Cost(paths, unbounded)


def _item(op: Any, av: Any) -> _Cost:
    if op is _parser.BRANCH:
        costs = [_sequence(branch) for branch in av[1]]
        paths = min(sum(c.paths for c in costs), MAX_PATHS + 1)
        return _Cost(paths, max(c.unbounded for c in costs))
    if op is _parser.SUBPATTERN:
        return _sequence(av[3])
    if op is _parser.ATOMIC_GROUP:
        return _sequence(av)
    if op in (_parser.ASSERT, _parser.ASSERT_NOT):
        return _sequence(av[1])
    if op in (_parser.MAX_REPEAT, _parser.MIN_REPEAT, _parser.POSSESSIVE_REPEAT):
        return _repeat(av[0], av[1], _sequence(av[2]))
    if op in (_parser.GROUPREF, _parser.GROUPREF_EXISTS):
        raise UnsafePatternError("uses a backreference; match the text without one")
    return _Cost(1, 0)


def _repeat(low: int, high: int, body: _Cost) -> _Cost:
    if high == _parser.MAXREPEAT:
        if body.paths > 1 or body.unbounded:
            raise UnsafePatternError(
                "repeats without bound a part that can itself match in several ways (a nested "
                "or ambiguous quantifier such as (a+)+ or (a|aa)*)"
            )
        return _Cost(1, 1)
    if body.unbounded and high > 1:
        raise UnsafePatternError(
            "repeats a group that holds an unbounded repeat, such as (a+){2,5}"
        )
    if body.paths == 1:
        return _Cost(min(high - low + 1, MAX_PATHS + 1), body.unbounded)
    paths = 0
    for count in range(low, high + 1):
        paths += body.paths**count
        if paths > MAX_PATHS:
            break
    return _Cost(min(paths, MAX_PATHS + 1), body.unbounded)


def _re2(pattern: str) -> Matcher | None:
    options = re2.Options()
    options.log_errors = False  # the sentence below says it; RE2 would also write to stderr
    try:
        return re2.compile(pattern, options)
    except re2.error:
        return None


def _cost(pattern: str) -> _Cost:
    try:
        parsed = _parser.parse(pattern)
    except re.error as exc:
        raise UnsafePatternError(f"{pattern!r} is not a valid regular expression: {exc}") from None
    try:
        return _sequence(parsed)
    except UnsafePatternError as exc:
        raise UnsafePatternError(f"the regular expression {pattern!r} {exc}") from None


def check_pattern(pattern: str) -> str:
    """``pattern`` if its cost is bounded; else UnsafePatternError with one sentence.

    The sentence names the pattern and what to change (it has no trailing full stop: the
    callers' error formats add one).
    """
    cost = _cost(pattern)
    where = f"the regular expression {pattern!r}"
    if cost.unbounded > MAX_UNBOUNDED:
        raise UnsafePatternError(
            f"{where} has {cost.unbounded} unbounded repeats ('*', '+', '{{n,}}'); use at most "
            f"{MAX_UNBOUNDED}"
        )
    if cost.paths > MAX_PATHS:
        raise UnsafePatternError(
            f"{where} can match in more than {MAX_PATHS} ways (optional parts or alternatives "
            "inside repeats); use fewer or narrower repeats"
        )
    if cost.unbounded and _re2(pattern) is None:
        raise UnsafePatternError(
            f"{where} needs a backtracking engine (a lookaround or similar), so bound each "
            "repeat, e.g. {1,64} instead of '+'"
        )
    return pattern


def compile_pattern(pattern: str) -> Matcher:
    """``pattern`` checked and compiled: on RE2 (linear time), or, for what RE2 cannot
    compile (lookarounds), on ``re`` once the check has bounded every repeat.

    Raises UnsafePatternError (a ConfigError) with one sentence.
    """
    check_pattern(pattern)
    compiled = _re2(pattern)
    return compiled if compiled is not None else re.compile(pattern)
