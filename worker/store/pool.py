"""Store: the PostgreSQL connection pool of a worker process, with the service's session settings."""

from __future__ import annotations

from psycopg_pool import ConnectionPool

from worker.settings import Settings


def open_pool(settings: Settings) -> ConnectionPool:
    """A psycopg connection pool with the worker's session settings (autocommit, timeouts).

    Opened per process (after fork in Celery children), never at import.
    """
    if not settings.database_url:
        raise RuntimeError("RATINGS_DATABASE_URL is not set")
    # force_custom_plan: psycopg prepares repeated statements, and a generic plan made while
    # `players` was small (a sequential scan for the row locks) would otherwise stay in use until an
    # ANALYZE; with autovacuum off that never comes and throughput collapses (seen in the benchmark).
    options = (f"-c lock_timeout={settings.lock_timeout_ms} -c statement_timeout={settings.statement_timeout_ms}"
               " -c plan_cache_mode=force_custom_plan")
    return ConnectionPool(
        settings.database_url,
        min_size=1,
        max_size=settings.pool_max_size,
        kwargs={"autocommit": True, "options": options},
        check=ConnectionPool.check_connection,
        open=True,
        name="ratings",
    )
