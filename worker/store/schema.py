"""Store: the schema version against the shipped migrations, and whether the database takes writes."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
import psycopg.errors

from worker.store.connection import scalar
from worker.store.migrate import MIGRATIONS_DIR

ENVIRONMENT_DATABASE_ERRORS: tuple[type[Exception], ...] = (
    psycopg.errors.UndefinedTable,  # 42P01: not migrated
    psycopg.errors.UndefinedColumn,  # 42703: migrated to an older version
    psycopg.errors.UndefinedFunction,  # 42883
    psycopg.errors.InsufficientPrivilege,  # 42501: the role may not write
    psycopg.errors.ReadOnlySqlTransaction,  # 25006: a read-only database or a demoted primary
    psycopg.errors.InvalidCatalogName,  # 3D000: the database does not exist
    psycopg.errors.InvalidAuthorizationSpecification,  # 28000
    psycopg.errors.InvalidPassword,  # 28P01
    # 26000 / 42P05: a prepared statement missing or there already: prepared statements do not
    # survive between transactions (PgBouncer in transaction mode before 1.22)
    psycopg.errors.InvalidSqlStatementName,
    psycopg.errors.DuplicatePreparedStatement,
)
"""Errors of the environment, not of a message: the same for every message until an operator
acts, so they are never dead letters; the worker backs off and keeps the messages queued."""


def environment_reason(exc: BaseException) -> str:
    """The ``reason`` of an :class:`worker.service.environment.EnvironmentNotReady` for the driver error ``exc``."""
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return "read_only"
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return "no_privilege"
    if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn |
                  psycopg.errors.UndefinedFunction):
        return "not_migrated"
    if isinstance(exc, psycopg.errors.InvalidSqlStatementName | psycopg.errors.DuplicatePreparedStatement):
        return "prepared_statements"
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return "unreachable"
    return "database_error"


PREPARED_STATEMENTS_HINT = (
    "prepared statements do not survive between this connection's transactions (PgBouncer in "
    "transaction mode before 1.22, or with max_prepared_statements = 0?): set "
    "RATINGS_DATABASE_PREPARED_STATEMENTS=false")
"""What an operator does about an error of reason ``prepared_statements``."""


def environment_detail(exc: BaseException) -> str:
    """The ``detail`` of an :class:`worker.service.environment.EnvironmentNotReady` for the driver
    error ``exc``: its message, after what to do where the message does not say it (one line first,
    as the backoff logs it)."""
    text = str(exc).strip()
    if environment_reason(exc) == "prepared_statements":
        return f"{PREPARED_STATEMENTS_HINT} ({text.splitlines()[0] if text else type(exc).__name__})"
    return text


def shipped_migrations() -> list[str]:
    """Ids of the migrations this code ships (``worker/store/migrations/*.sql``, rollbacks excluded), sorted."""
    return sorted(p.stem for p in MIGRATIONS_DIR.glob("*.sql") if not p.name.endswith(".rollback.sql"))


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    """The database's applied migrations (yoyo's ``_yoyo_migration``) against the shipped ones."""

    applied: tuple[str, ...]
    shipped: tuple[str, ...]

    @property
    def missing(self) -> tuple[str, ...]:
        """Shipped migrations not applied (``ratings migrate`` applies them)."""
        return tuple(m for m in self.shipped if m not in self.applied)

    @property
    def unknown(self) -> tuple[str, ...]:
        """Applied migrations this code does not ship: the database is newer than the code."""
        return tuple(m for m in self.applied if m not in self.shipped)

    @property
    def ok(self) -> bool:
        """Every shipped migration applied, none unknown."""
        return not self.missing and not self.unknown

    def problem(self) -> str | None:
        """One line saying what is wrong and what to do, or None when :attr:`ok`."""
        if self.unknown:
            return (f"the database schema is newer than this code (unknown migration(s): {', '.join(self.unknown)}); "
                    "run the release that shipped them")
        if self.missing:
            state = "not migrated" if not self.applied else f"{len(self.missing)} migration(s) behind"
            return f"the database is {state} (missing: {', '.join(self.missing)}); run `ratings migrate`"
        return None


def schema_status(conn: psycopg.Connection) -> SchemaStatus:
    """Read the applied migration ids (none when yoyo's table does not exist). ``conn`` in autocommit."""
    exists = scalar(conn.execute("SELECT to_regclass('_yoyo_migration') IS NOT NULL"))
    applied: tuple[str, ...] = ()
    if exists:
        applied = tuple(sorted(r[0] for r in conn.execute("SELECT migration_id FROM _yoyo_migration")))
    return SchemaStatus(applied, tuple(shipped_migrations()))


def write_readiness(conn: psycopg.Connection) -> str | None:
    """Why the service could not write through ``conn`` (a fresh autocommit connection), or None.

    One of ``"read_only"`` (``transaction_read_only`` on, or the server is a standby in recovery),
    ``"not_migrated"`` / ``"schema_newer"`` (see :func:`schema_status`), ``"no_privilege"`` (the
    role may not insert into ``ledger``).
    """
    row = conn.execute("SELECT current_setting('transaction_read_only') = 'on', pg_is_in_recovery()").fetchone()
    read_only, recovery = row if row is not None else (False, False)
    if read_only or recovery:
        return "read_only"
    status = schema_status(conn)
    if status.unknown:
        return "schema_newer"
    if status.missing:
        return "not_migrated"
    if not scalar(conn.execute("SELECT has_table_privilege('ledger', 'INSERT')")):
        return "no_privilege"
    return None


def database_writable(database_url: str, timeout: float = 3.0) -> str:
    """``"ok"`` when a fresh connection to ``database_url`` could run the rating transaction, else
    why: a :func:`write_readiness` reason, or the driver error's class name (for ``/readyz``)."""
    from worker.store.connection import connect

    try:
        with connect(database_url, autocommit=True, connect_timeout=timeout) as conn:
            return write_readiness(conn) or "ok"
    except psycopg.Error as exc:
        return type(exc).__name__
