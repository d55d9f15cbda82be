"""The async driver's rewrite of psycopg placeholders to asyncpg's numbered ones."""

from __future__ import annotations

import pytest

from core.sqlexec import _bound, dollar_sql


def test_positional_placeholders_are_numbered_in_order():
    assert dollar_sql("UPDATE t SET a = a + %s WHERE id = %s") == (
        "UPDATE t SET a = a + $1 WHERE id = $2",
        None,
    )


def test_a_name_used_twice_is_one_parameter():
    sql, names = dollar_sql("SELECT %(amount)s WHERE x >= %(amount)s + %(cap)s")

    assert (sql, names) == ("SELECT $1 WHERE x >= $1 + $2", ("amount", "cap"))
    assert _bound("SELECT %(amount)s, %(cap)s", {"cap": 7, "amount": 5}) == (
        "SELECT $1, $2",
        (5, 7),
    )


def test_a_statement_mixing_both_styles_is_refused():
    with pytest.raises(ValueError):
        dollar_sql("SELECT %s, %(name)s")
