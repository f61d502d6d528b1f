r"""Regexes an admin or a config file supplies: the one check of their cost, and their engine.

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
- an alternation inside a repeat must have branches that cannot start with the same
  character (``(?:\w|[a-z_])``, ``(?i)(?:a|A)``, ``(?:\s|\S)``, ``(?:[a-c]|[b-d])`` are
  refused). The check reads the alternatives as written: Python's parser merges
  single-character alternatives into one set, Java's engine does not, and there each is a
  separate way to match (2**64 for ``(?:\w|[a-z_]){1,64}``). A character counts as common
  when either engine's meaning of the classes gives it to both branches (Python's Unicode
  ``\s`` and Java's ASCII ``\S`` both hold ``\xa0``);
- no backreferences, no octal escapes (``\100`` is ``@`` in Python, group 1 and ``00`` in
  Java), and no other escape Java reads differently (``\v``, ``\Z``, ``\U``, ``\b`` in a
  class), nor a ``[`` or ``&&`` in a class (Java's nested classes and intersections);
- a pattern RE2 cannot compile (a lookaround) runs on Python's ``re``: it must bound every
  repeat and match in at most ``MAX_BACKTRACKING_PATHS`` ways, so each start position costs
  at most that many tries.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from re import _parser  # type: ignore[attr-defined]  # Python's own parse of a pattern
from typing import TYPE_CHECKING, Any, TypeAlias

import re2

from simple_binlog.errors import ConfigError

MAX_PATHS = 10_000
MAX_UNBOUNDED = 3
# Patterns that run on Python's re (lookarounds): about a microsecond per character of text.
MAX_BACKTRACKING_PATHS = 100

if TYPE_CHECKING:  # re2's pattern class is generic in its stubs only
    Matcher: TypeAlias = re2._Regexp[str] | re.Pattern[str]


class UnsafePatternError(ConfigError, ValueError):
    """A pattern that is invalid or may cost too much; a ValueError for pydantic validators."""


@dataclass(frozen=True, slots=True)
class _Cost:
    paths: int  # ways the bounded parts can match (capped just above MAX_PATHS)
    unbounded: int  # unbounded repeats
    overlap: bool = False  # holds an alternation whose branches can start alike


# -- the pattern as written: alternatives not merged into one set -------------------------


def _unmerged_parser() -> Callable[[str], Any]:
    """``re._parser.parse`` without the merge of single-character alternatives into a set
    (``a|[ab]`` stays two branches, as in Java); common prefixes are still factored out
    (``ab|ac`` is ``a(?:b|c)``, which costs a backtracking engine the same)."""
    namespace = dict(vars(_parser))

    def parse_sub(source: Any, state: Any, verbose: int, nested: int) -> Any:
        items: list[Any] = []
        while True:
            first = not nested and not items
            items.append(namespace["_parse"](source, state, verbose, nested + 1, first))
            if not source.match("|"):
                break
            if not nested:
                verbose = state.flags & _parser.SRE_FLAG_VERBOSE
        if len(items) == 1:
            return items[0]
        subpattern = _parser.SubPattern(state)
        while all(items) and all(item[0] == items[0][0] for item in items):
            subpattern.append(items[0][0])
            for item in items:
                del item[0]
        subpattern.append((_parser.BRANCH, (None, items)))
        return subpattern

    def copy(function: Any) -> Any:
        return types.FunctionType(
            function.__code__, namespace, function.__name__, function.__defaults__
        )

    namespace["_parse_sub"] = parse_sub
    namespace["_parse"] = copy(_parser._parse)
    parse: Callable[[str], Any] = copy(_parser.parse)
    return parse


_parse_unmerged = _unmerged_parser()

# -- the characters a branch can start with --------------------------------------------------

# One element of a first-character set: (opcode, argument, flags in force).
_Atom: TypeAlias = tuple[Any, Any, int]

_JAVA_SPACE = " \t\n\x0b\f\r"
_JAVA_WORD = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
# Characters tried besides ASCII and the patterns' own literals and range ends.
_PROBES = (
    "\x85\xa0\xaa\xb2\xb5\xdf\xe9\u0130\u0131\u017f\u0660\u0966\u1680\u2000\u200a"
    "\u2028\u2029\u202f\u205f\u212a\u2160\u3000\u4e2d\uff10\uffff\U0001d7ce\U0001f600"
    "\U0010ffff"
)
# Characters re's IGNORECASE also treats as one that lower()/upper() do not pair up.
_FOLDS = (
    frozenset("sS\u017f"),
    frozenset("kK\u212a"),
    frozenset("\xb5\u03bc\u039c"),
    frozenset("iI\u0130\u0131"),
    frozenset("\xdf\u1e9e"),
    frozenset("\u03b8\u03d1\u0398"),
    frozenset("\u03c3\u03c2\u03a3"),
)
_RANGE_SPREAD = 512  # a range's characters tried: all of a small one, this many of a large one


def _variants(char: str, flags: int) -> set[str]:
    if not flags & _parser.SRE_FLAG_IGNORECASE:
        return {char}
    found = {char, char.lower(), char.upper(), char.casefold(), char.swapcase()}
    for group in _FOLDS:
        if found & group:
            found |= group
    return {c for c in found if len(c) == 1}


def _category(code: Any, char: str, java: bool) -> bool:
    names = {
        _parser.CATEGORY_DIGIT: (char.isdecimal, "0123456789"),
        _parser.CATEGORY_WORD: (lambda: char.isalnum() or char == "_", _JAVA_WORD),
        _parser.CATEGORY_SPACE: (char.isspace, _JAVA_SPACE),
    }
    negated = {
        _parser.CATEGORY_NOT_DIGIT: _parser.CATEGORY_DIGIT,
        _parser.CATEGORY_NOT_WORD: _parser.CATEGORY_WORD,
        _parser.CATEGORY_NOT_SPACE: _parser.CATEGORY_SPACE,
    }
    if code in negated:
        return not _category(negated[code], char, java)
    python, ascii_set = names[code]
    return char in ascii_set if java else bool(python())


def _in_atom(atom: _Atom, char: str, java: bool) -> bool:
    op, av, flags = atom
    if op is _parser.ANY:
        newlines = "\n" if not java else "\n\r\x85\u2028\u2029"
        return bool(flags & _parser.SRE_FLAG_DOTALL) or char not in newlines
    variants = _variants(char, flags)
    if op is _parser.LITERAL:
        return chr(av) in variants
    if op is _parser.NOT_LITERAL:
        return chr(av) not in variants
    negate = bool(av) and av[0][0] is _parser.NEGATE
    hit = False
    for item_op, item_av in av:
        if item_op is _parser.LITERAL:
            hit = chr(item_av) in variants
        elif item_op is _parser.RANGE:
            hit = any(item_av[0] <= ord(v) <= item_av[1] for v in variants)
        elif item_op is _parser.CATEGORY:
            hit = _category(item_av, char, java)
        if hit:
            break
    return hit != negate


def _candidates(atoms: list[_Atom]) -> set[str]:
    found: set[str] = set()
    for op, av, flags in atoms:
        items = av if op is _parser.IN else [(op, av)]
        for item_op, item_av in items:
            if item_op in (_parser.LITERAL, _parser.NOT_LITERAL):
                found |= _variants(chr(item_av), flags | _parser.SRE_FLAG_IGNORECASE)
            elif item_op is _parser.RANGE:
                low, high = item_av
                step = max(1, (high - low) // _RANGE_SPREAD)
                for code in [*range(low, high + 1, step), high]:
                    found |= _variants(chr(code), flags | _parser.SRE_FLAG_IGNORECASE)
    return found


def _overlap(first: list[_Atom], second: list[_Atom]) -> bool:
    """Whether a character may start both, in Python's or in Java's reading of the classes
    (Python's \\s is Unicode, Java's \\S all but six ASCII characters: both hold \\xa0)."""

    def holds(atoms: list[_Atom], char: str) -> bool:
        return any(_in_atom(a, char, java) for a in atoms for java in (False, True))

    chars = _ascii_and_probes() | _candidates(first) | _candidates(second)
    return any(holds(first, char) and holds(second, char) for char in chars)


@cache
def _ascii_and_probes() -> frozenset[str]:
    return frozenset(map(chr, range(128))) | frozenset(_PROBES)


def _first(items: Any, flags: int) -> tuple[list[_Atom], bool]:
    """The atoms a sequence can start with, and whether it can match the empty string."""
    atoms: list[_Atom] = []
    for op, av in items:
        found, empty = _first_item(op, av, flags)
        atoms += found
        if not empty:
            return atoms, False
    return atoms, True


def _first_item(op: Any, av: Any, flags: int) -> tuple[list[_Atom], bool]:
    if op in (_parser.LITERAL, _parser.NOT_LITERAL, _parser.ANY, _parser.IN):
        return [(op, av, flags)], False
    if op is _parser.BRANCH:
        atoms: list[_Atom] = []
        empty = False
        for branch in av[1]:
            found, branch_empty = _first(branch, flags)
            atoms += found
            empty = empty or branch_empty
        return atoms, empty
    if op is _parser.SUBPATTERN:
        return _first(av[3], (flags | av[1]) & ~av[2])
    if op is _parser.ATOMIC_GROUP:
        return _first(av, flags)
    if op in (_parser.MAX_REPEAT, _parser.MIN_REPEAT, _parser.POSSESSIVE_REPEAT):
        found, empty = _first(av[2], flags)
        return found, empty or av[0] == 0
    return [], True  # anchors and lookarounds: zero width


# -- the cost ------------------------------------------------------------------------------


def _sequence(items: Any, flags: int) -> _Cost:
    paths, unbounded, overlap = 1, 0, False
    for op, av in items:
        cost = _item(op, av, flags)
        paths = min(paths * cost.paths, MAX_PATHS + 1)
        unbounded += cost.unbounded
        overlap = overlap or cost.overlap
    return _Cost(paths, unbounded, overlap)


def _item(op: Any, av: Any, flags: int) -> _Cost:
    if op is _parser.BRANCH:
        return _branch(av[1], flags)
    if op is _parser.SUBPATTERN:
        return _sequence(av[3], (flags | av[1]) & ~av[2])
    if op is _parser.ATOMIC_GROUP:
        return _sequence(av, flags)
    if op in (_parser.ASSERT, _parser.ASSERT_NOT):
        return _sequence(av[1], flags)
    if op in (_parser.MAX_REPEAT, _parser.MIN_REPEAT, _parser.POSSESSIVE_REPEAT):
        return _repeat(av[0], av[1], _sequence(av[2], flags))
    if op in (_parser.GROUPREF, _parser.GROUPREF_EXISTS):
        raise UnsafePatternError("uses a backreference; match the text without one")
    return _Cost(1, 0)


def _branch(branches: Any, flags: int) -> _Cost:
    """Branches that cannot start alike cost a backtracking engine one way (the others fail
    on the first character); else each is a way to match the same text."""
    costs = [_sequence(branch, flags) for branch in branches]
    firsts = [_first(branch, flags) for branch in branches]
    overlap = any(empty for _, empty in firsts) or any(
        _overlap(firsts[i][0], firsts[j][0])
        for i in range(len(firsts))
        for j in range(i + 1, len(firsts))
    )
    if overlap:
        paths = min(sum(c.paths for c in costs), MAX_PATHS + 1)
    else:
        paths = max(c.paths for c in costs)
    return _Cost(
        paths,
        max(c.unbounded for c in costs),
        overlap or any(c.overlap for c in costs),
    )


def _repeat(low: int, high: int, body: _Cost) -> _Cost:
    if body.overlap and high > 1:
        raise UnsafePatternError(
            "repeats an alternation whose branches can match the same character, such as "
            "(?:\\w|[a-z_]) or (?i)(?:a|A) (each is a way to match in Java); make the branches "
            "exclusive or write one character class such as [\\w]"
        )
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


# Escapes Python (and RE2) read otherwise than Java, Spark's engine for shard rules.
_JAVA_ESCAPES = {
    "v": "\\v, a vertical tab in Python but any vertical whitespace in Java; write \\x0b",
    "Z": "\\Z, the very end in Python but the end before a final newline in Java; use $",
    "U": "\\U, which Java does not know; write the character itself",
}


def _octal_digits(text: str) -> str:
    digits = ""
    for char in text:
        if char not in "01234567":
            break
        digits += char
    return digits or text[:1]


def _java_divergence(pattern: str) -> str | None:
    """What in ``pattern`` Java reads otherwise than Python, in a few words, or None."""
    in_class = at_class_start = False
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            following = pattern[index + 1 : index + 4]
            escape = following[:1]
            if escape.isdigit() and (
                in_class
                or escape == "0"
                or (len(following) == 3 and all(c in "01234567" for c in following))
            ):
                return (
                    f"uses the octal escape \\{_octal_digits(following)}, which Java reads as a "
                    "group reference; write the character as \\xhh or itself"
                )
            if escape in _JAVA_ESCAPES:
                return f"uses {_JAVA_ESCAPES[escape]}"
            if in_class and escape == "b":
                return "uses \\b in a character class (a backspace in Python); write \\x08"
            at_class_start = False
            index += 2
            continue
        if in_class:
            if char == "]" and not at_class_start:
                in_class = False
            elif char == "[" or pattern.startswith("&&", index):
                return (
                    "has '[' or '&&' inside a character class (a nested class or intersection "
                    "in Java); escape it as \\[ or \\&"
                )
            at_class_start = False
        elif char == "[":
            in_class = True
            at_class_start = True
            if pattern.startswith("^", index + 1):
                index += 1
        index += 1
    return None


def _cost(pattern: str) -> _Cost:
    try:
        written = _parse_unmerged(pattern)
    except re.error as exc:
        raise UnsafePatternError(f"{pattern!r} is not a valid regular expression: {exc}") from None
    divergence = _java_divergence(pattern)
    if divergence is not None:
        raise UnsafePatternError(f"the regular expression {pattern!r} {divergence}")
    try:
        return _sequence(written, written.state.flags)
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
    if _re2(pattern) is None:
        if cost.unbounded:
            raise UnsafePatternError(
                f"{where} needs a backtracking engine (a lookaround or similar), so bound each "
                "repeat, e.g. {1,64} instead of '+'"
            )
        if cost.paths > MAX_BACKTRACKING_PATHS:
            raise UnsafePatternError(
                f"{where} needs a backtracking engine (a lookaround or similar) and can match "
                f"in more than {MAX_BACKTRACKING_PATHS} ways; use fewer or narrower repeats"
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
