"""The --where validator: accepted conditions re-emitted with every value bound, hostile text
refused with one sentence. Includes hypothesis properties over random text and literals."""

from __future__ import annotations

import datetime as dt
import inspect
import re
import sys
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mock_replay.condition import compile_condition, quote_identifier, tokenize
from mock_replay.errors import ConditionError

NOW = dt.datetime(2026, 11, 22, 9, 30, tzinfo=dt.UTC)
COLUMNS = ["id", "status", "created_at", "amount", "Name", "a%b", "select"]


def compile_(text: str):
    return compile_condition(text, COLUMNS, NOW)


@pytest.mark.parametrize(
    ("text", "sql", "params"),
    [
        ("id = 5", "(`id` = %s)", (5,)),
        ("id != 5", "(`id` <> %s)", (5,)),
        ("amount >= 10.50", "(`amount` >= %s)", (Decimal("10.50"),)),
        (
            "status IN ('PAID', 'NEW') AND NOT id BETWEEN 1 AND 5",
            "((`status` IN (%s, %s)) AND (NOT (`id` BETWEEN %s AND %s)))",
            ("PAID", "NEW", 1, 5),
        ),
        ("status NOT LIKE 'x%'", "(`status` NOT LIKE %s)", ("x%",)),
        ("status IS NOT NULL OR id IS NULL", "((`status` IS NOT NULL) OR (`id` IS NULL))", ()),
        ("name = 'O''Brien'", "(`Name` = %s)", ("O'Brien",)),
        ("name = 'a\\'b\\\\'", "(`Name` = %s)", ("a'b\\",)),
        ("`a%b` % 2 = 1", "((`a%%b` %% %s) = %s)", (2, 1)),
        ("`select` = 1", "(`select` = %s)", (1,)),
        ("-id < -(1 + 2) * 3", "((- `id`) < ((- (%s + %s)) * %s))", (1, 2, 3)),
        (
            "created_at > NOW() - INTERVAL 7 DAY",
            "(`created_at` > (%s - INTERVAL %s DAY))",
            (dt.datetime(2026, 11, 22, 9, 30), 7),
        ),
        ("DATE(created_at) = CURDATE()", "(DATE(`created_at`) = %s)", (dt.date(2026, 11, 22),)),
        (
            "date_sub(created_at, interval 3 hour) < '2026-01-01'",
            "(DATE_SUB(`created_at`, INTERVAL %s HOUR) < %s)",
            (3, "2026-01-01"),
        ),
        ("COALESCE(status, 'x') = 'x'", "(COALESCE(`status`, %s) = %s)", ("x", "x")),
        ("(id = 1)", "(`id` = %s)", (1,)),
        ("id = 1e3", "(`id` = %s)", (Decimal("1e3"),)),
    ],
)
def test_accepted_conditions_are_reemitted_with_values_bound(text, sql, params) -> None:
    condition = compile_(text)
    assert condition.sql == sql
    assert condition.params == params
    assert condition.sql.count("%s") == len(condition.params)


def test_columns_are_checked_case_insensitively_and_spelled_as_the_table_does() -> None:
    condition = compile_("NAME = 'x' and ID = 1")
    assert condition.columns == {"Name", "id"}
    assert "`Name`" in condition.sql and "`id`" in condition.sql


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("id = 1; DROP TABLE t", "';' is not allowed"),
        ("id = 1 -- comment", "comments are not allowed"),
        ("id = 1 # comment", "comments are not allowed"),
        ("id = 1 /* c */", "comments are not allowed"),
        ("id = 1 */", "comments are not allowed"),
        ("status = 'open", "a quoted string is not closed"),
        ("status = 'x\\'", "a quoted string is not closed"),
        ('status = "x"', "double quotes are not allowed"),
        ("id IN (SELECT id FROM t)", "SELECT is not allowed"),
        ("id = 1 UNION SELECT 1", "found 'UNION'"),
        ("id = 1 INTO OUTFILE '/tmp/x'", "found 'INTO'"),
        ("id = @x", "variables (@…) are not allowed"),
        ("id = @@version", "variables (@…) are not allowed"),
        ("sleep(5) = 0", "SLEEP is not allowed"),
        ("benchmark(100, md5('a'))", "BENCHMARK is not allowed"),
        ("load_file('/etc/passwd') IS NULL", "LOAD_FILE is not allowed"),
        ("version() = 1", "the function VERSION is not allowed"),
        ("password = 'x'", "'password' is not a column of the table"),
        ("t.id = 1", "the character '.' is not allowed"),
        ("id = 0x41", "is not a number"),
        ("id = x'41'", "'x' is not a column"),
        ("id || 1", "the character '|' is not allowed"),
        ("id = 1 AND", "it ends too early"),
        ("", "it is empty"),
        ("   ", "it is empty"),
        ("(id = 1", "expected ')'"),
        ("id = 1)", "expected AND, OR or the end"),
        ("id = = 1", "expected a value or a column"),
        ("NOW(1) = id", "NOW takes 0 arguments, not 1"),
        ("date_add(created_at, 1) > 0", "expected INTERVAL"),
        ("date_add(created_at) > 0", "DATE_ADD takes 2 arguments, not 1"),
        ("created_at > NOW() - INTERVAL 1 FORTNIGHT", "expected an interval unit"),
        ("id = 1 AND `nope` = 2", "'nope' is not a column of the table"),
        ("id\x00 = 1", "NUL character"),
        ("CASE WHEN id = 1 THEN 1 END", "CASE is not allowed"),
        ("id = 1 XOR id = 2", "found 'XOR'"),
        ("id := 1", "the character ':' is not allowed"),
        ("(" * 200 + "id" + ")" * 200, "nests deeper than 64 levels"),
        ("NOT " * 200 + "id", "nests deeper than 64 levels"),
        ("- " * 200 + "1", "nests deeper than 64 levels"),
        ("id = 'é' AND status = ´x´", "the character '´' is not allowed"),
    ],
)
def test_hostile_or_malformed_conditions_are_refused_with_one_sentence(text, reason) -> None:
    with pytest.raises(ConditionError) as caught:
        compile_(text)
    message = str(caught.value)
    assert message.startswith("the replay condition is refused: ")
    assert reason in message
    assert message.endswith(".") and "\n" not in message


def test_overlong_condition_is_refused_before_parsing() -> None:
    with pytest.raises(ConditionError, match="longer than 100 characters"):
        compile_condition("id = 1 OR " * 20 + "id = 2", COLUMNS, NOW, max_chars=100)


def test_quote_identifier_doubles_backticks_and_percent() -> None:
    assert quote_identifier("we`ird%") == "`we``ird%%`"


# -- properties ---------------------------------------------------------------------------

# Everything the emitted SQL may consist of: quoted known columns, placeholders, keywords and
# operators of the grammar, function names of the allow-list, parentheses and commas.
_ALLOWED_SQL_TOKEN = re.compile(
    r"`(?:id|status|created_at|amount|Name|a%%b|select)`|%s|%%|<=>|<=|>=|<>|[=<>+\-*/(),]"
    r"|\b(?:AND|OR|NOT|IN|BETWEEN|LIKE|IS|NULL|TRUE|FALSE|INTERVAL|DAY|HOUR|MINUTE|SECOND|WEEK"
    r"|MONTH|QUARTER|YEAR|MICROSECOND|DATE|DATE_ADD|DATE_SUB|LOWER|UPPER|LENGTH|CHAR_LENGTH|ABS"
    r"|COALESCE|IFNULL)\b|\s+"
)


def _only_grammar_tokens(sql: str) -> bool:
    return _ALLOWED_SQL_TOKEN.sub("", sql) == ""


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=80))
def test_any_text_is_refused_or_emits_only_grammar_tokens(text: str) -> None:
    try:
        condition = compile_(text)
    except ConditionError:
        return
    assert _only_grammar_tokens(condition.sql), condition.sql
    assert condition.sql.count("%s") == len(condition.params)


_pieces = st.sampled_from(
    [
        "id", "status", "`Name`", "1", "2.5", "'a'", "=", "<>", "<", "(", ")", "AND", "OR",
        "NOT", "IN", "BETWEEN", "LIKE", "IS", "NULL", ",", "+", "-", "*", "%", ";", "--", "#",
        "/*", "'", "SELECT", "UNION", "@x", "NOW()", "DATE(", "INTERVAL", "DAY", "sleep(",
    ]
)  # fmt: skip


@settings(max_examples=600, deadline=None)
@given(st.lists(_pieces, max_size=14))
def test_token_soup_is_refused_or_emits_only_grammar_tokens(pieces: list[str]) -> None:
    try:
        condition = compile_(" ".join(pieces))
    except ConditionError:
        return
    assert _only_grammar_tokens(condition.sql), condition.sql
    assert condition.sql.count("%s") == len(condition.params)


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=40), st.sampled_from(["=", "<>", "LIKE", "NOT LIKE"]))
def test_a_string_literal_is_always_bound_never_inlined(literal: str, operator: str) -> None:
    quoted = "'" + literal.replace("\\", "\\\\").replace("'", "''") + "'"
    if "\x00" in literal:
        return
    condition = compile_(f"status {operator} {quoted} OR id = 3")
    assert condition.params == (literal, 3)
    assert _only_grammar_tokens(condition.sql)


def test_tokens_keep_their_positions_for_error_messages() -> None:
    tokens = tokenize("id = 'x'")
    assert [(t.kind, t.at) for t in tokens] == [("word", 1), ("op", 4), ("string", 6), ("end", 9)]


def _interval_chain(levels: int) -> str:
    """``created_at + INTERVAL created_at + INTERVAL … DAY DAY …``: each amount a sum."""
    return "created_at" + " + INTERVAL created_at" * levels + " DAY" * levels + " > NOW()"


def _deepest_frames(limit: int) -> str:
    """Parentheses as deep as allowed, then an INTERVAL chain inside, in ``limit`` chars."""
    levels = (limit - len("(" * 63 + "id" + ")" * 63 + ">0")) // len("+INTERVAL id DAY")
    return "(" * 63 + "id" + "+INTERVAL id" * levels + " DAY" * levels + ")" * 63 + ">0"


@pytest.mark.parametrize(
    "text",
    [
        pytest.param(_interval_chain(3_000), id="thousands-of-intervals"),
        pytest.param(_deepest_frames(4_000), id="parentheses-then-intervals-in-4000-chars"),
        pytest.param("(" * 5_000 + "id" + ")" * 5_000, id="thousands-of-parentheses"),
        pytest.param("NOT " * 5_000 + "id", id="thousands-of-not"),
        pytest.param("ABS(" * 3_000 + "id" + ")" * 3_000 + " > 0", id="thousands-of-functions"),
        pytest.param(
            "DATE_ADD(" * 2_000 + "created_at" + ", INTERVAL 1 DAY)" * 2_000 + " > NOW()",
            id="thousands-of-date-add",
        ),
    ],
)
def test_deeply_nested_attacker_conditions_are_refused_not_a_recursion_error(text) -> None:
    """An attacker's condition nested past any real need (within the configured length, or
    a length limit raised by an operator): one sentence, never Python's RecursionError."""
    with pytest.raises(ConditionError) as caught:
        compile_condition(text, COLUMNS, NOW, max_chars=len(text))
    message = str(caught.value)
    assert message.startswith("the replay condition is refused: it nests deeper than 64 levels")
    assert message.endswith(".") and "\n" not in message


def test_a_condition_at_the_depth_limit_is_accepted() -> None:
    text = _interval_chain(60)
    compiled = compile_condition(text, COLUMNS, NOW, max_chars=len(text))
    assert compiled.sql.count("INTERVAL") == 60
    assert compiled.columns == {"created_at"}


@pytest.mark.parametrize(
    "text",
    [
        "(" * 63 + "id" + ")" * 63 + " > 0",
        "(" * 40 + "ABS(" * 11 + "id" + ")" * 51 + " > 0",
        "NOT " * 20 + "(" * 20 + "- " * 20 + "id" + ")" * 20 + " > 0",
        "(" * 60 + _interval_chain(3) + ")" * 60,
    ],
)
def test_the_depth_limit_holds_within_a_bounded_python_stack(text) -> None:
    """Deepest accepted inputs of each kind need fewer than 600 frames above the caller, so
    the parser's own refusal comes first even from a deep caller (a web worker, a test)."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(len(inspect.stack()) + 600)
    try:
        compiled = compile_condition(text, COLUMNS, NOW, max_chars=len(text))
    finally:
        sys.setrecursionlimit(previous)
    assert compiled.sql.startswith("(")
