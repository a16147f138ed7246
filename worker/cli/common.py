"""Helpers the ``ratings`` commands share: the exit codes, consoles, JSON output, the two URLs, database
connections and the ladders' policies, each from the composition root (:mod:`worker.bootstrap`), with
exit 3 (:attr:`ExitCode.NOT_READY`) when one is missing."""

from __future__ import annotations

import json
import sys
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console

from worker.cli.exit_codes import ExitCode
from worker.settings import get_settings, required_url

if TYPE_CHECKING:
    from engine.policy import AnyPolicy

console = Console()
err = Console(stderr=True)


def fail(message: str, code: ExitCode, *, markup: bool = True) -> NoReturn:
    """Print ``message`` on standard error and exit with ``code``."""
    err.print(message, markup=markup, highlight=False)
    raise typer.Exit(code)


def _json_default(value: Any) -> Any:
    """JSON for what database rows hold besides JSON's types: a timestamp or date as ISO 8601
    text (with its UTC offset), a NUMERIC as a number."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def print_json(document: Any) -> None:
    """Write ``document`` as one JSON object (UTF-8, then a newline) on standard output: the
    ``--json`` output of a command, whose shapes docs/operators/cli.md documents."""
    sys.stdout.write(json.dumps(document, default=_json_default, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def require_database_url(check_schema: bool = True) -> str:
    """``RATINGS_DATABASE_URL``; print why and exit 3 (not ready) when it is not set, or
    (``check_schema``) when the database is not migrated or is newer than this code (one line; an
    unreachable database is left to the command to report)."""
    url = get_settings().database_url
    if not url:
        fail("[red]RATINGS_DATABASE_URL is not set[/red] (only `ratings demo` starts embedded servers).",
             ExitCode.NOT_READY)
    if check_schema:
        problem = schema_problem()
        if problem:
            fail(f"[red]refused[/red]: {problem}", ExitCode.NOT_READY)
    return url


def open_database(*, autocommit: bool = False, check_schema: bool = True, connect_timeout: float | None = None,
                  session: bool = False):
    """A connection for a command (:func:`worker.bootstrap.open_database`; use it as a context
    manager), after :func:`require_database_url` (exit 3 when the URL is not set or, with
    ``check_schema``, the schema does not match). ``session``: the direct URL
    (``RATINGS_DIRECT_DATABASE_URL``, else ``RATINGS_DATABASE_URL``)."""
    from worker import bootstrap

    require_database_url(check_schema=check_schema)
    return bootstrap.open_database(get_settings(), autocommit=autocommit, connect_timeout=connect_timeout,
                                   session=session)


def schema_problem() -> str | None:
    """What is wrong with the database's schema version (:class:`worker.store.schema.SchemaStatus`),
    or None when it matches the shipped migrations or the database cannot be reached."""
    from worker import bootstrap
    from worker.store.connection import DatabaseError
    from worker.store.schema import schema_status

    try:
        with bootstrap.open_database(get_settings(), autocommit=True, connect_timeout=10) as conn:
            return schema_status(conn).problem()
    except DatabaseError:
        return None


def refuse_tls_problems(broker_url: str | None, events_url: str | None = None, *, session: bool = False) -> None:
    """Exit 3 (not ready) with one line per refused TLS certificate of the database (``RATINGS_DATABASE_URL``,
    or with ``session`` the direct URL), the broker (Redis or an ``amqps://`` RabbitMQ, verified
    against ``RATINGS_BROKER_CA_FILE``) and the event stream's Redis (:func:`worker.tls.tls_refusal`:
    a mismatch or an untrusted CA never heals by retrying); any other connection error is left to
    the service's own retries."""
    from worker import bootstrap
    from worker.redis_url import redis_client
    from worker.store.connection import DatabaseError
    from worker.tls import tls_refusal

    def redis_problem(url: str, setting: str) -> str | None:
        try:
            client = redis_client(url, socket_connect_timeout=5, socket_timeout=5)
            client.ping()
            client.close()
        except Exception as exc:  # noqa: BLE001  # any client error: only a TLS refusal stops the start
            return tls_refusal(exc, setting)
        return None

    problems = []
    if get_settings().database_url:
        try:
            bootstrap.open_database(get_settings(), autocommit=True, connect_timeout=10, session=session).close()
        except DatabaseError as exc:
            problems.append(tls_refusal(exc, "RATINGS_DATABASE_URL"))
    if broker_url and broker_url.startswith("amqps://"):
        from worker.service.rabbitmq import connect_once

        try:
            connect_once(broker_url, get_settings().broker_ca_file)
        except Exception as exc:  # noqa: BLE001  # as above
            problems.append(tls_refusal(exc, "RATINGS_BROKER_URL"))
    elif broker_url and not broker_url.startswith("amqp://"):
        problems.append(redis_problem(broker_url, "RATINGS_BROKER_URL"))
    if events_url and events_url != broker_url:
        problems.append(redis_problem(events_url, "RATINGS_EVENTS_REDIS_URL"))
    for problem in filter(None, problems):
        err.print(f"[red]refused[/red]: {problem}", markup=True, highlight=False)
    if any(problems):
        raise typer.Exit(ExitCode.NOT_READY)


def require_session_database_url(check_schema: bool = True) -> str:
    """``RATINGS_DIRECT_DATABASE_URL``, else ``RATINGS_DATABASE_URL`` (for commands that need a
    session: a rebuild, migrations); exit 3 when neither is set, or as :func:`require_database_url`."""
    require_database_url(check_schema=check_schema)
    return required_url(get_settings().session_database_url, "RATINGS_DATABASE_URL")


def require_broker_url() -> str:
    """``RATINGS_BROKER_URL``; print why and exit 3 (not ready) when it is not set."""
    url = get_settings().broker_url
    if not url:
        fail("[red]RATINGS_BROKER_URL is not set[/red] (only `ratings demo` starts embedded servers).",
             ExitCode.NOT_READY)
    return url


def require_events_url() -> str:
    """The event stream's Redis URL (``RATINGS_EVENTS_REDIS_URL``, else a Redis ``RATINGS_BROKER_URL``);
    print why and exit 3 (not ready) when there is none."""
    url = get_settings().events_url
    if not url:
        fail("[red]RATINGS_EVENTS_REDIS_URL is not set[/red]: the broker is RabbitMQ, and the events "
             "go to a Redis Stream; set it to that Redis's URL (redis://host:6379/0).", ExitCode.NOT_READY)
    return url


def cli_producer_app():
    """A producer app (:func:`worker.producer.producer_app`) for ``RATINGS_BROKER_URL``, verifying an
    ``amqps://`` broker against ``RATINGS_BROKER_CA_FILE`` and, on Redis, waiting for
    ``RATINGS_PUBLISH_WAIT_REPLICAS``; exit 3 when the URL is not set."""
    from worker.producer import producer_app

    settings = get_settings()
    return producer_app(require_broker_url(), wait_replicas=settings.publish_wait_replicas,
                        wait_timeout_ms=settings.publish_wait_timeout_ms, ca_file=settings.broker_ca_file)


def configured_policies() -> dict[str, AnyPolicy]:
    """Ladder name to engine policy from the ladders file (:func:`worker.bootstrap.engine_policies`);
    exit 3 (not ready) naming file, line and key if broken."""
    from worker import bootstrap

    return _or_exit(bootstrap.engine_policies)


def ladder_policies():
    """Each ladder's :class:`worker.store.ladders.LadderPolicy` (policy, content, version) from the
    ladders file (:func:`worker.bootstrap.load_ladder_policies`); exit 3 naming file, line and key
    if broken."""
    from worker import bootstrap

    return _or_exit(bootstrap.load_ladder_policies)


def ladder_files():
    """Each ladder's policy with its content and source (:func:`worker.bootstrap.ladder_files`);
    exit 3 naming file, line and key if broken."""
    from worker import bootstrap

    return _or_exit(bootstrap.ladder_files)


def _or_exit(read):
    """``read(settings)``; on a broken ladders file (``RATINGS_LADDERS_FILE``: the environment, not
    the command line), print the error (file, line, key) and exit 3."""
    from worker.policy.ladders import LadderConfigError

    try:
        return read(get_settings())
    except LadderConfigError as exc:
        err.print(f"ladders file error: {exc}", markup=False)
        raise typer.Exit(ExitCode.NOT_READY) from exc


def require_known_ladder(ladder: str) -> None:
    """Exit 2 (usage) naming the configured ladders when ``ladder`` is not one of them."""
    policies = configured_policies()
    if ladder not in policies:
        fail(f"[red]unknown ladder {ladder!r}[/red]; configured: {', '.join(sorted(policies))}", ExitCode.USAGE)


def who_asks(by: str | None) -> str:
    """``by``, or ``user@host`` of this process when ``None`` (recorded by rebuilds and dead-letter actions)."""
    import getpass
    import socket

    return by or f"{getpass.getuser()}@{socket.gethostname()}"
