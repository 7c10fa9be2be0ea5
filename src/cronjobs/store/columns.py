"""Column types shared by the tables (`models`) and the statements: a row id, a UTC time
with microseconds and a long text, each with its MySQL/MariaDB variant (declared without
importing that dialect)."""

from __future__ import annotations

from sqlalchemy import BigInteger, DateTime, Integer, Text
from sqlalchemy.ext.compiler import compiles

# SQLite only auto-increments an INTEGER PRIMARY KEY; BIGINT elsewhere.
Id = BigInteger().with_variant(Integer(), "sqlite")


class MicrosecondDateTime(DateTime):
    """MySQL's and MariaDB's `DATETIME(6)` (`sqlalchemy.dialects.mysql.DATETIME(fsp=6)`,
    declared without importing that dialect): the `UtcDateTime` variant there."""


class LongTextType(Text):
    """MySQL's and MariaDB's `LONGTEXT` (`sqlalchemy.dialects.mysql.LONGTEXT()`, declared
    without importing that dialect): the `LongText` variant there."""


@compiles(MicrosecondDateTime)
def _datetime6(_type: MicrosecondDateTime, _compiler, **_kw) -> str:
    return "DATETIME(6)"


@compiles(LongTextType)
def _longtext(_type: LongTextType, _compiler, **_kw) -> str:
    return "LONGTEXT"


# Microsecond precision on MySQL/MariaDB (plain DATETIME drops fractions).
UtcDateTime = DateTime().with_variant(MicrosecondDateTime(), "mysql", "mariadb")
LongText = Text().with_variant(LongTextType(), "mysql", "mariadb")
