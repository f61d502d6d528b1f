"""The ``--where`` condition: hostile text turned into SQL with every value bound.

The text is tokenized and parsed with a small recursive-descent parser for a whitelisted
grammar, then re-emitted: columns are checked against the table and quoted with backticks,
every literal becomes a ``%s`` parameter, and only the parser's own keywords and operators
reach the SQL. Anything outside the grammar is refused with one sentence, before a single row
is read. Grammar (case-insensitive keywords)::

    condition  := or_expr
    or_expr    := and_expr (OR and_expr)*
    and_expr   := not_expr (AND not_expr)*
    not_expr   := NOT not_expr | predicate
    predicate  := sum [ compare sum
                      | [NOT] IN '(' sum (',' sum)* ')'
                      | [NOT] BETWEEN sum AND sum
                      | [NOT] LIKE sum
                      | IS [NOT] (NULL | TRUE | FALSE) ]
    sum        := product (('+' | '-') (product | INTERVAL sum UNIT))*
    product    := unary (('*' | '/' | '%') unary)*
    unary      := '-' unary | primary
    primary    := number | 'string' | NULL | TRUE | FALSE | column | `column`
                | function '(' [args] ')' | '(' condition ')'

``NOW()`` and ``CURDATE()`` are bound to the replay's query start (UTC), not evaluated by
the server: every chunk of a run, and a resumed run, selects by the same instant. Pure logic.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from mock_replay.errors import ConditionError

# Every recursive construct (parentheses and function arguments, NOT, unary minus, INTERVAL)
# counts one level; at most 8 Python frames a level, so the refusal comes long before
# Python's recursion limit (1000) even when the caller's own stack is deep.
MAX_DEPTH = 64

_KEYWORDS = frozenset(
    {"and", "or", "not", "in", "between", "like", "is", "null", "true", "false", "interval"}
)
# Words that are never a column or function here; named in the error so a user sees why.
_FORBIDDEN_WORDS = frozenset(
    {
        "select", "union", "into", "outfile", "dumpfile", "from", "insert", "update", "delete",
        "drop", "alter", "create", "replace", "truncate", "grant", "revoke", "call", "exec",
        "execute", "handler", "load", "lock", "unlock", "set", "show", "use", "declare",
        "prepare", "exists", "having", "limit", "procedure", "sleep", "benchmark", "load_file",
        "xor", "div", "regexp", "rlike", "sounds", "collate", "binary", "escape", "case",
        "when", "then", "else", "end", "cast", "convert", "values", "row", "for", "window",
        "over", "with", "lateral",
    }
)  # fmt: skip
# name → (minimum, maximum) number of arguments; None: any number from the minimum on.
_FUNCTIONS: dict[str, tuple[int, int | None]] = {
    "date": (1, 1),
    "now": (0, 0),
    "curdate": (0, 0),
    "date_add": (2, 2),
    "date_sub": (2, 2),
    "year": (1, 1),
    "month": (1, 1),
    "day": (1, 1),
    "lower": (1, 1),
    "upper": (1, 1),
    "length": (1, 1),
    "char_length": (1, 1),
    "abs": (1, 1),
    "coalesce": (1, None),
    "ifnull": (2, 2),
}
_INTERVAL_UNITS = frozenset({"microsecond", "second", "minute", "hour", "day", "week", "month",
                             "quarter", "year"})  # fmt: skip
_COMPARISONS = frozenset({"=", "<>", "!=", "<", "<=", ">", ">=", "<=>"})

_NUMBER = re.compile(r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")
_OPERATORS = ("<=>", "<=", ">=", "<>", "!=", "=", "<", ">", "+", "-", "*", "/", "%", "(", ")",
              ",")  # fmt: skip
_BACKSLASH_ESCAPES = {"0": "\0", "'": "'", '"': '"', "b": "\b", "n": "\n", "r": "\r",
                      "t": "\t", "Z": "\x1a", "\\": "\\"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Token:
    kind: str  # "number", "string", "word", "quoted", "op", "end"
    text: str
    at: int  # 1-based character position, for error messages
    value: str | Decimal | None = None


@dataclass(frozen=True, slots=True)
class Condition:
    """A validated condition: SQL with ``%s`` placeholders and its parameters, in order.

    ``sql`` holds no user text but backtick-quoted column names of the table; ``%`` in it is
    doubled, as pymysql's parameter formatting expects.
    """

    text: str
    sql: str
    params: tuple[object, ...]
    columns: frozenset[str]


def _refuse(reason: str, at: int | None = None) -> ConditionError:
    where = f" (at character {at})" if at is not None else ""
    return ConditionError(f"the replay condition is refused: {reason}{where}.")


def quote_identifier(name: str) -> str:
    """A backtick-quoted name, safe inside SQL formatted by pymysql (``%`` doubled)."""
    return "`" + name.replace("`", "``").replace("%", "%%") + "`"


def _read_string(text: str, start: int) -> tuple[str, int]:
    """The single-quoted string starting at ``start``, MySQL's default escaping rules."""
    out: list[str] = []
    index = start + 1
    while index < len(text):
        char = text[index]
        if char == "\\":
            if index + 1 >= len(text):
                break
            follower = text[index + 1]
            # MySQL keeps the backslash of \% and \_ (they matter to LIKE) and of unknown
            # escapes drops only the backslash.
            if follower in "%_":
                out.append("\\" + follower)
            else:
                out.append(_BACKSLASH_ESCAPES.get(follower, follower))
            index += 2
            continue
        if char == "'":
            if index + 1 < len(text) and text[index + 1] == "'":
                out.append("'")
                index += 2
                continue
            return "".join(out), index + 1
        out.append(char)
        index += 1
    raise _refuse("a quoted string is not closed", start + 1)


def tokenize(text: str) -> list[Token]:  # noqa: PLR0912, PLR0915
    tokens: list[Token] = []
    index = 0
    while index < len(text):
        char = text[index]
        at = index + 1
        if char in " \t\r\n":
            index += 1
            continue
        if text.startswith("--", index) or char == "#" or text.startswith("/*", index):
            raise _refuse("comments are not allowed", at)
        if text.startswith("*/", index):
            raise _refuse("comments are not allowed", at)
        if char == ";":
            raise _refuse("it must be one expression, ';' is not allowed", at)
        if char == "@":
            raise _refuse("variables (@…) are not allowed", at)
        if char == '"':
            raise _refuse("strings take single quotes ('…'), double quotes are not allowed", at)
        if char == "'":
            value, index = _read_string(text, index)
            tokens.append(Token("string", "'…'", at, value))
            continue
        if char == "`":
            end = text.find("`", index + 1)
            if end < 0:
                raise _refuse("a `quoted` column name is not closed", at)
            name = text[index + 1 : end]
            if not name:
                raise _refuse("an empty `` column name", at)
            tokens.append(Token("quoted", name, at, name))
            index = end + 1
            continue
        number = _NUMBER.match(text, index)
        if number is not None and (char.isdigit() or char == "."):
            following = text[number.end() : number.end() + 1]
            if following and (following.isalnum() or following in "_$"):
                raise _refuse(f"{text[index : number.end() + 1]!r} is not a number", at)
            try:
                parsed = Decimal(number.group())
            except InvalidOperation:
                raise _refuse(f"{number.group()!r} is not a number", at) from None
            tokens.append(Token("number", number.group(), at, parsed))
            index = number.end()
            continue
        word = _WORD.match(text, index)
        if word is not None:
            tokens.append(Token("word", word.group(), at, word.group().lower()))
            index = word.end()
            continue
        operator = next((op for op in _OPERATORS if text.startswith(op, index)), None)
        if operator is None:
            raise _refuse(f"the character {char!r} is not allowed", at)
        tokens.append(Token("op", operator, at))
        index += len(operator)
    tokens.append(Token("end", "", len(text) + 1))
    return tokens


class _Parser:
    def __init__(self, tokens: list[Token], columns: dict[str, str], now: dt.datetime) -> None:
        self._tokens = tokens
        self._index = 0
        self._columns = columns  # lower-case name → the table's spelling
        self._now = now
        self.params: list[object] = []
        self.used: set[str] = set()
        self._depth = 0

    # -- token helpers --------------------------------------------------------------------
    @property
    def _current(self) -> Token:
        return self._tokens[self._index]

    def _advance(self) -> Token:
        token = self._tokens[self._index]
        self._index += 1
        return token

    def _at_word(self, *words: str) -> bool:
        token = self._current
        return token.kind == "word" and token.value in words

    def _at_op(self, *ops: str) -> bool:
        token = self._current
        return token.kind == "op" and token.text in ops

    def _expect_word(self, word: str) -> None:
        if not self._at_word(word):
            raise self._unexpected(f"expected {word.upper()}")
        self._advance()

    def _expect_op(self, op: str) -> None:
        if not self._at_op(op):
            raise self._unexpected(f"expected '{op}'")
        self._advance()

    def _unexpected(self, expectation: str) -> ConditionError:
        token = self._current
        if token.kind == "end":
            return _refuse(f"it ends too early ({expectation})", token.at)
        shown = token.text if token.kind != "string" else "a string"
        return _refuse(f"{expectation}, found {shown!r}", token.at)

    def _bind(self, value: object) -> str:
        self.params.append(value)
        return "%s"

    # -- grammar ----------------------------------------------------------------------------
    def parse(self) -> str:
        if self._current.kind == "end":
            raise _refuse("it is empty")
        sql = self._or()
        if self._current.kind != "end":
            raise self._unexpected("expected AND, OR or the end")
        return sql

    def _or(self) -> str:
        with self._nested():
            parts = [self._and()]
            while self._at_word("or"):
                self._advance()
                parts.append(self._and())
            return parts[0] if len(parts) == 1 else "(" + " OR ".join(parts) + ")"

    def _and(self) -> str:
        parts = [self._not()]
        while self._at_word("and"):
            self._advance()
            parts.append(self._not())
        return parts[0] if len(parts) == 1 else "(" + " AND ".join(parts) + ")"

    def _not(self) -> str:
        if self._at_word("not"):
            self._advance()
            with self._nested():
                return f"(NOT {self._not()})"
        return self._predicate()

    @contextmanager
    def _nested(self) -> Iterator[None]:
        """One level deeper for the construct parsed inside; refused past ``MAX_DEPTH``."""
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _refuse(f"it nests deeper than {MAX_DEPTH} levels", self._current.at)
            yield
        finally:
            self._depth -= 1

    def _predicate(self) -> str:
        left = self._sum()
        token = self._current
        if token.kind == "op" and token.text in _COMPARISONS:
            self._advance()
            operator = "<>" if token.text == "!=" else token.text
            return f"({left} {operator} {self._sum()})"
        negated = False
        if self._at_word("not"):
            self._advance()
            negated = True
            if not self._at_word("in", "between", "like"):
                raise self._unexpected("expected IN, BETWEEN or LIKE after NOT")
        prefix = "NOT " if negated else ""
        if self._at_word("in"):
            self._advance()
            self._expect_op("(")
            items = [self._sum()]
            while self._at_op(","):
                self._advance()
                items.append(self._sum())
            self._expect_op(")")
            return f"({left} {prefix}IN ({', '.join(items)}))"
        if self._at_word("between"):
            self._advance()
            low = self._sum()
            self._expect_word("and")
            high = self._sum()
            return f"({left} {prefix}BETWEEN {low} AND {high})"
        if self._at_word("like"):
            self._advance()
            return f"({left} {prefix}LIKE {self._sum()})"
        if self._at_word("is"):
            self._advance()
            is_not = False
            if self._at_word("not"):
                self._advance()
                is_not = True
            if not self._at_word("null", "true", "false"):
                raise self._unexpected("expected NULL, TRUE or FALSE after IS")
            what = str(self._advance().value).upper()
            return f"({left} IS {'NOT ' if is_not else ''}{what})"
        return left

    def _sum(self) -> str:
        sql = self._product()
        while self._at_op("+", "-"):
            operator = self._advance().text
            if self._at_word("interval"):
                sql = f"({sql} {operator} {self._interval()})"
            else:
                sql = f"({sql} {operator} {self._product()})"
        return sql

    def _interval(self) -> str:
        self._expect_word("interval")
        with self._nested():
            amount = self._sum()
        unit = self._current
        if unit.kind != "word" or unit.value not in _INTERVAL_UNITS:
            raise self._unexpected("expected an interval unit such as DAY or HOUR")
        self._advance()
        return f"INTERVAL {amount} {str(unit.value).upper()}"

    def _product(self) -> str:
        sql = self._unary()
        while self._at_op("*", "/", "%"):
            operator = self._advance().text
            # pymysql formats the query with %: a literal % is written %%.
            sql = f"({sql} {'%%' if operator == '%' else operator} {self._unary()})"
        return sql

    def _unary(self) -> str:
        if self._at_op("-"):
            self._advance()
            with self._nested():
                return f"(- {self._unary()})"
        return self._primary()

    def _primary(self) -> str:  # noqa: PLR0911
        token = self._current
        if token.kind == "number":
            self._advance()
            assert isinstance(token.value, Decimal)
            value = token.value
            return self._bind(int(value) if re.fullmatch(r"\d+", token.text) else value)
        if token.kind == "string":
            self._advance()
            return self._bind(token.value)
        if token.kind == "quoted":
            self._advance()
            return self._column(str(token.value), token.at)
        if token.kind == "op" and token.text == "(":
            self._advance()
            inner = self._or()
            self._expect_op(")")
            return inner
        if token.kind == "word":
            word = str(token.value)
            if word in ("null", "true", "false"):
                self._advance()
                return word.upper()
            if word in _FORBIDDEN_WORDS:
                raise _refuse(f"{token.text.upper()} is not allowed in a condition", token.at)
            if word in _KEYWORDS:
                raise self._unexpected("expected a value or a column")
            self._advance()
            if self._at_op("("):
                return self._function(token)
            return self._column(token.text, token.at)
        raise self._unexpected("expected a value or a column")

    def _column(self, name: str, at: int) -> str:
        spelled = self._columns.get(name.lower())
        if spelled is None:
            shown = name if len(name) <= 64 else name[:64] + "…"
            raise _refuse(f"{shown!r} is not a column of the table", at)
        self.used.add(spelled)
        return quote_identifier(spelled)

    def _function(self, name_token: Token) -> str:
        name = str(name_token.value)
        arity = _FUNCTIONS.get(name)
        if arity is None:
            allowed = ", ".join(sorted(f.upper() for f in _FUNCTIONS))
            raise _refuse(
                f"the function {name_token.text.upper()} is not allowed (allowed: {allowed})",
                name_token.at,
            )
        self._expect_op("(")
        with self._nested():
            args: list[str] = []
            if not self._at_op(")"):
                args.append(self._or())
                while self._at_op(","):
                    self._advance()
                    if name in ("date_add", "date_sub") and len(args) == 1:
                        args.append(self._interval())
                    else:
                        args.append(self._or())
            self._expect_op(")")
        low, high = arity
        if len(args) < low or (high is not None and len(args) > high):
            raise _refuse(
                f"{name.upper()} takes {low if low == high else f'at least {low}'} "
                f"argument{'s' if low != 1 else ''}, not {len(args)}",
                name_token.at,
            )
        if name == "now":
            return self._bind(self._now.replace(tzinfo=None))
        if name == "curdate":
            return self._bind(self._now.date())
        return f"{name.upper()}({', '.join(args)})"


def compile_condition(
    text: str, columns: Iterable[str], now: dt.datetime, max_chars: int = 4_000
) -> Condition:
    """Validate ``text`` against the table's ``columns``; ConditionError says why not."""
    if len(text) > max_chars:
        raise _refuse(f"it is longer than {max_chars} characters")
    if "\x00" in text:
        raise _refuse("it contains a NUL character")
    by_lower = {name.lower(): name for name in columns}
    parser = _Parser(tokenize(text), by_lower, now.astimezone(dt.UTC) if now.tzinfo else now)
    sql = parser.parse()
    return Condition(text, sql, tuple(parser.params), frozenset(parser.used))
