"""``ratings migrate``, ``worker``, ``relay`` and ``doctor``: running and checking the service."""

from __future__ import annotations

import os
import tempfile
from typing import Annotated, Optional

import typer
from rich.table import Table

from worker import store as repository
from worker.cli.common import (
    ExitCode,
    configured_policies,
    console,
    err,
    fail,
    open_database,
    print_json,
    require_broker_url,
    require_database_url,
    require_events_url,
    require_session_database_url,
)
from worker.settings import get_settings
from worker.store.connection import NotMigrated


def migrate() -> None:
    """Apply pending database migrations (yoyo-migrations, files in worker/store/migrations)."""
    from worker.store.migrate import migrate as run

    applied = run(require_session_database_url(check_schema=False))
    console.print(f"applied {len(applied)} migration(s): {', '.join(applied) or 'none pending'}")
    _record_policies()


def _record_policies() -> None:
    """Keep each configured ladder's policy content under its version (``policies`` table)."""
    from worker.cli.policy import ladder_policies_or_exit

    loaded = ladder_policies_or_exit()
    try:
        with open_database(connect_timeout=10) as conn:
            repository.record_policies(conn, {name: (lp.version, lp.config.canonical()) for name, lp in loaded.items()})
    except NotMigrated:
        err.print("policies not recorded: run `ratings migrate` first")


def worker(
    concurrency: Annotated[int, typer.Option(help="Worker child processes.")] = 2,
    name: Annotated[str, typer.Option(help="Celery node name.")] = "ratings@%h",
    loglevel: Annotated[str, typer.Option(help="Log level.")] = "INFO",
    pool: Annotated[str, typer.Option(help="Celery pool (prefork, solo, threads).")] = "prefork",
) -> None:
    """Start a Celery worker consuming the ratings queue with the service's settings.

    Refuses (exit 3, not ready) a database newer than this code. A database not migrated yet is reported
    (one line now, then one per backoff interval): the worker waits, not ready, keeps the
    messages queued, and applies them once `ratings migrate` has run.
    """
    from worker.cli.common import refuse_tls_problems, schema_problem

    require_database_url(check_schema=False)
    refuse_tls_problems(require_broker_url(), get_settings().events_url)
    problem = schema_problem()
    if problem and "newer than this code" in problem:
        fail(f"[red]refused[/red]: {problem}", ExitCode.NOT_READY)
    if problem:
        err.print(f"[yellow]warning[/yellow]: {problem}; the worker waits for it (not ready) and keeps the messages")
    require_broker_url()
    _warn_broker_durability()
    configured_policies()  # a broken ladders file stops the worker here, before it takes any message
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # before prometheus_client is imported
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="ratings-metrics-")
    from worker.bootstrap import create_app

    settings = get_settings()
    create_app(settings).worker_main(
        ["worker", "-Q", settings.queue, "-c", str(concurrency), "-n", name, "-l", loglevel,
         "-P", pool, "--without-gossip", "--without-mingle"]
    )


def relay() -> None:
    """Publish committed rating-changed events from the outbox to the Redis Stream."""
    from worker.bootstrap import build_relay
    from worker.cli.common import refuse_tls_problems
    from worker.service.observability import configure_logging

    require_database_url()
    refuse_tls_problems(require_broker_url(), require_events_url(), session=True)
    _warn_broker_durability()
    configured_policies()  # a broken ladders file: one line and exit 3, before the relay starts
    settings = get_settings()
    configure_logging(settings.log_level, settings.log_json)
    relay = build_relay(settings)
    try:
        relay.run()
    except KeyboardInterrupt:
        pass



def _warn_broker_durability() -> None:
    """Warn loudly (stderr) when a Redis broker's settings can lose queued matches; never refuses.
    (A RabbitMQ broker keeps the queue as a durable, replicated quorum queue: nothing to check.)"""
    import redis

    from worker.broker_durability import broker_durability
    from worker.redis_url import redis_client

    if get_settings().broker_is_rabbitmq:
        return
    client = redis_client(require_broker_url(), socket_connect_timeout=5, socket_timeout=5)
    try:
        problems = broker_durability(client).problems()
    except redis.RedisError:
        return  # unreachable: the service's own retries and /readyz report it
    finally:
        client.close()
    for problem in problems:
        err.print(f"[bold red]WARNING[/bold red]: {problem}")


def doctor(
    outbox_lag: Annotated[float, typer.Option(help="Seconds an event may stay unpublished.")] = 60.0,
    max_queue_depth: Annotated[Optional[int], typer.Option(help="Fail above this many queued messages.")] = None,
    skip_verify: Annotated[bool, typer.Option(help="Do not replay the ledgers (large ledgers).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object on standard output (docs/operators/cli.md).")] = False,
) -> None:
    """Check the service's health; exit 1 when something is wrong.

    Reports: database and broker reachable, outbox rows unpublished for longer than
    ``--outbox-lag`` seconds, open dead letters by reason (any open one is a finding: it waits
    for requeue or discard), queue depth (queued and reserved-unacknowledged), and
    ledger/stored-rating mismatches (``verify`` of every configured ladder). A server that cannot
    be reached is a failed check here (exit 1), not exit 3: reporting it is what doctor is for.
    """
    from worker.ops.doctor import run_checks

    findings = run_checks(get_settings(), configured_policies(), outbox_lag, max_queue_depth, not skip_verify)
    ok = all(f.ok for f in findings)
    if as_json:
        print_json({"ok": ok, "checks": [{"check": f.check, "ok": f.ok, "detail": f.detail} for f in findings]})
        if not ok:
            raise typer.Exit(ExitCode.FINDINGS)
        return
    table = Table(title="ratings doctor")
    table.add_column("check")
    table.add_column("status")
    table.add_column("detail", overflow="fold")
    for f in findings:
        table.add_row(f.check, "[green]ok[/green]" if f.ok else "[red]FAIL[/red]", f.detail)
    console.print(table)
    if not ok:
        raise typer.Exit(ExitCode.FINDINGS)


def api(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "0.0.0.0",
    port: Annotated[Optional[int], typer.Option(help="Port (default: RATINGS_API_PORT, 8080).")] = None,
    workers: Annotated[int, typer.Option(help="uvicorn worker processes (each with its own pool).", min=1)] = 1,
) -> None:
    """Serve the read API (/v1/...), /health, /metrics and the leaderboard page (/ladders/...).

    Reads only, through RATINGS_API_DATABASE_URL (a read replica, a role granted ratings_api), else
    RATINGS_DATABASE_URL. Bearer tokens from RATINGS_API_TOKENS when set.
    """
    import uvicorn

    settings = get_settings()
    if not settings.api_url:
        fail("[red]RATINGS_API_DATABASE_URL is not set[/red] (nor RATINGS_DATABASE_URL).", ExitCode.NOT_READY)
    uvicorn.run("worker.bootstrap:api_from_environment", factory=True, host=host, port=port or settings.api_port,
                workers=workers, log_level=settings.log_level.lower(), access_log=False)
