"""Errors of the environment and the schema check: classification, backoff, migration status (no servers)."""

from __future__ import annotations

import psycopg.errors

from worker.service.environment import Backoff, EnvironmentNotReady, backoff_cap
from worker.store.schema import SchemaStatus, environment_detail, environment_reason, shipped_migrations


def test_environment_errors_are_classified_by_what_an_operator_fixes():
    assert environment_reason(psycopg.errors.ReadOnlySqlTransaction("x")) == "read_only"
    assert environment_reason(psycopg.errors.UndefinedTable("x")) == "not_migrated"
    assert environment_reason(psycopg.errors.InsufficientPrivilege("x")) == "no_privilege"
    assert environment_reason(psycopg.OperationalError("x")) == "unreachable"


def test_prepared_statements_lost_between_transactions_are_an_error_of_the_environment_that_names_the_setting():
    for exc in (psycopg.errors.DuplicatePreparedStatement('prepared statement "_pg3_0" already exists'),
                psycopg.errors.InvalidSqlStatementName('prepared statement "_pg3_3" does not exist')):
        assert environment_reason(exc) == "prepared_statements"
        first = environment_detail(exc).splitlines()[0]  # the line the backoff logs
        assert "RATINGS_DATABASE_PREPARED_STATEMENTS=false" in first and str(exc) in first
    assert environment_detail(psycopg.errors.ReadOnlySqlTransaction("read only\nmore")) == "read only\nmore"


def test_the_backoff_logs_an_environment_errors_reason_once_and_the_first_line_of_its_detail(caplog):
    exc = EnvironmentNotReady("prepared_statements", environment_detail(
        psycopg.errors.DuplicatePreparedStatement('prepared statement "_pg3_0" already exists')))
    Backoff(initial=0.5).next_delay(exc, "requeueing the message(s)")
    logged = caplog.records[-1].getMessage()
    assert logged.startswith("database not ready (prepared_statements: prepared statements do not survive")
    assert "prepared_statements: prepared_statements" not in logged  # the reason, once
    assert 'set RATINGS_DATABASE_PREPARED_STATEMENTS=false (prepared statement "_pg3_0" already exists))' in logged


def test_backoff_doubles_up_to_its_cap_and_resets(monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr("worker.service.environment.time.sleep", slept.append)
    backoff = Backoff(initial=1.0, cap=5.0)
    for _ in range(5):
        backoff.wait(RuntimeError("down"))
    assert slept == [1.0, 2.0, 4.0, 5.0, 5.0]  # 1, 2, 4, then the cap
    backoff.reset()
    backoff.wait(RuntimeError("down"))
    assert slept[-1] == 1.0


def test_backoff_stays_inside_the_soft_time_limit():
    assert backoff_cap(7.2) == 7.2 / 3  # the fault suite's 9 s time limit: soft limit 7.2 s
    assert backoff_cap(96) == 10.0
    assert backoff_cap(None) == 10.0


def test_schema_status_names_missing_and_unknown_migrations():
    shipped = tuple(shipped_migrations())
    assert shipped[0] == "0001.initial-schema" and all(not m.endswith(".rollback") for m in shipped)
    assert SchemaStatus(shipped, shipped).ok
    none = SchemaStatus((), shipped)
    assert none.missing == shipped and "not migrated" in none.problem()
    behind = SchemaStatus(shipped[:-1], shipped)
    assert behind.missing == shipped[-1:] and "1 migration(s) behind" in behind.problem()
    newer = SchemaStatus((*shipped, "9999.future"), shipped)
    assert newer.unknown == ("9999.future",) and "newer than this code" in newer.problem()
