"""The one settings object. Nothing else in the project reads the environment.

Every field is read from an environment variable with the prefix ``RATINGS_`` (for example
``RATINGS_DATABASE_URL``) or from a ``.env`` file in the working directory.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from worker.broker import AMQP_SCHEMES, REDIS_SCHEMES, is_rabbitmq

DEFAULT_LADDERS_FILE = Path(__file__).with_name("ladders.toml")


class Settings(BaseSettings):
    """Worker, relay and CLI settings (environment prefix ``RATINGS_``). Durations in seconds."""

    # hide_input_in_errors: a URL refused here may hold a password; pydantic's error text would quote it
    model_config = SettingsConfigDict(env_prefix="RATINGS_", env_file=".env", extra="ignore",
                                      hide_input_in_errors=True)

    database_url: str | None = Field(
        default=None,
        description="PostgreSQL URL (libpq form; TLS via ?sslmode=verify-full). Unset: the demo "
        "and the tests start an embedded PostgreSQL.",
    )
    direct_database_url: str | None = Field(
        default=None,
        description="PostgreSQL URL of a direct (session) connection for the two components that "
        "need session state: the outbox relay (its leadership is a session advisory lock, it sleeps "
        "on LISTEN) and `ratings rebuild` (a session advisory lock and locks across transactions). "
        "Set it when RATINGS_DATABASE_URL points at PgBouncer in transaction mode; unset: "
        "RATINGS_DATABASE_URL.",
    )
    broker_url: str | None = Field(
        default=None,
        description="Celery broker URL, which also chooses the broker: Redis (redis://, rediss:// for "
        "TLS, sentinel://host:26379?master_name=NAME;sentinel://host2:26379 through Redis Sentinel; "
        "then also the event stream's Redis unless RATINGS_EVENTS_REDIS_URL is set) or RabbitMQ "
        "(amqp://, amqps:// for TLS: quorum queues, publisher confirms). Unset: the demo and the tests "
        "start an embedded Redis-compatible server.",
    )
    events_redis_url: str | None = Field(
        default=None,
        description="Redis URL of the rating-changed event stream (outbox relay, consumers, doctor, "
        "metrics). Unset: RATINGS_BROKER_URL when that is a Redis URL; required when the broker is "
        "RabbitMQ (the demo then starts an embedded Redis for the events).",
    )
    broker_ca_file: str | None = Field(
        default=None,
        description="amqps:// broker only: PEM file of the CA that signed the RabbitMQ server's "
        "certificate (unset: the system's trusted CAs). The certificate must also name the URL's host.",
    )
    rabbitmq_heartbeat: int = Field(
        default=30, ge=5, le=600,
        description="RabbitMQ broker only: AMQP heartbeat of the worker's broker connection, in "
        "seconds. A worker node that stops answering (host paused or frozen, network cut) keeps its "
        "connection, and the messages RabbitMQ pushed to it stay reserved, until the broker misses "
        "its heartbeats (about two intervals): then they are redelivered. The RabbitMQ counterpart "
        "of RATINGS_VISIBILITY_TIMEOUT.",
    )
    redis_socket_timeout: float = Field(
        default=5.0, gt=1.0, le=300.0,
        description="Seconds the workers' broker connections and the relay's event-stream client wait "
        "for a reply or a connection (`ratings doctor`'s Redis checks: for a reply) before they give "
        "the connection up and reconnect (through a Sentinel URL: to the primary the Sentinels name "
        "now). A Redis "
        "that freezes (paused VM, partition, SIGSTOP) keeps its sockets open and never answers: only "
        "this deadline notices it. Above the workers' 1 s blocking poll (BLMOVE/BRPOP with a 1 s "
        "server-side timeout), which must return before it.",
    )
    redis_health_check_interval: int = Field(
        default=5, ge=1, le=300,
        description="Seconds between the workers' checks of their waiting broker poll (kombu's "
        "health_check_interval): a poll whose reply is overdue by more than 1 s + this is dropped and "
        "reconnected, so a frozen broker is noticed within 1 s + 2 x this while a worker is idle. "
        "Also redis-py's: a connection idle for longer is PINGed before its next command.",
    )
    rabbitmq_consumer_timeout: float = Field(
        default=1800.0, gt=0,
        description="RabbitMQ broker only: the broker's consumer_timeout in seconds, as configured on "
        "the server (rabbitmq.conf `consumer_timeout`, in ms there; RabbitMQ's default 30 min). The "
        "broker closes the channel of a consumer holding a message unacknowledged longer, and every "
        "message it holds is redelivered; checked at start against how long a worker may hold one. "
        "AMQP does not expose the server's value: set this to what the server runs with.",
    )
    publish_wait_replicas: int = Field(
        default=0, ge=0, le=16,
        description="Redis replicas that must acknowledge each publish of the CLI's producers (Redis WAIT on the "
        "connection that wrote); fewer within publish_wait_timeout_ms is an error (replicas_not_acknowledged). "
        "0: no wait.",
    )
    publish_wait_timeout_ms: int = Field(
        default=1000, gt=0, le=60_000, description="Milliseconds a publish waits for publish_wait_replicas.",
    )
    state_dir: Path = Field(
        default=Path(".ratings-state"),
        description="Folder holding the embedded servers' files.",
    )
    ladders_file: Path = Field(
        default=DEFAULT_LADDERS_FILE,
        description="TOML file mapping each ladder name to its rating policy.",
    )
    queue: str = Field(default="ratings", description="Celery queue of match-finished tasks (a Redis "
                       "list; on RabbitMQ a durable quorum queue).")
    stream: str = Field(
        default="ratings.rating-changed", description="Redis Stream the outbox relay publishes to."
    )
    stream_maxlen: int = Field(
        default=1_000_000, gt=0,
        description="Approximate cap on the stream's length (XADD MAXLEN ~). The database is the "
        "source of truth; the stream is a bounded delivery channel.",
    )
    visibility_timeout: int = Field(
        default=300, gt=0,
        description="Redis transport visibility timeout: a message reserved by a worker that died "
        "without acknowledging it is redelivered after this many seconds. Must exceed "
        "task_time_limit, or a slow task would run twice at once; shorter means faster recovery "
        "after a lost worker node.",
    )
    restore_interval: int = Field(
        default=10, gt=0,
        description="Seconds between sweeps that return expired unacknowledged messages (from a "
        "worker that died) to the queue. Recovery after a lost worker takes about "
        "visibility_timeout + restore_interval.",
    )
    task_time_limit: int = Field(
        default=120, gt=0,
        description="Hard time limit of one rating task (the child is killed past it). A rating "
        "transaction takes milliseconds; the in-process retries stop after 60 s; 120 s leaves room "
        "and stays below visibility_timeout.",
    )
    prefetch_multiplier: int = Field(
        default=4, gt=0,
        description="Messages each worker child reserves ahead without batching: enough to hide the broker "
        "round trip, few to strand until the visibility timeout when a node dies. With batching each child "
        "reserves 2 x batch_size (at least this), one batch applied while the next fills.",
    )
    lock_timeout_ms: int = Field(
        default=5000, gt=0, description="PostgreSQL lock_timeout of the rating transaction's lock waits other "
        "than rows held outside the service (the ladder's shared lock, rows other rating transactions hold, a new "
        "player's row being inserted), in milliseconds: a long wait fails fast and is retried."
    )
    statement_timeout_ms: int = Field(default=30000, gt=0, description="PostgreSQL statement_timeout, in ms.")
    player_lock_wait_ms: int = Field(
        default=1000, ge=0, le=60000,
        description="Most milliseconds a rating transaction waits in all for player rows a session "
        "outside the service holds (an operator's, a frozen worker's); past it the matches of those "
        "players (and later matches of the same players in the batch) are deferred, retried with "
        "backoff, and the batch's other matches applied (no head-of-line blocking). Rows other rating "
        "transactions hold are waited for up to lock_timeout_ms, each retry at least 50 ms.",
    )
    correction_max_matches: int = Field(
        default=2000, ge=0, le=1_000_000,
        description="Most of a ladder's stored matches that may follow a late match for it to be placed in "
        "its chronological position (the matches a correction reads and may re-rate); past it the late "
        "match is applied at the end, flagged (`placed_at_end`), counted, and reported by `ratings doctor`.",
    )
    deferral_backoff_initial: float = Field(
        default=0.25, gt=0, le=60,
        description="Seconds a deferred message waits in its worker before its first retry; doubled "
        "(with jitter) per deferral of the same message, up to deferral_backoff_max.",
    )
    deferral_backoff_max: float = Field(
        default=5.0, gt=0, le=60,
        description="Most seconds a deferred message waits in its worker before its next retry.",
    )
    idle_in_transaction_timeout_ms: int = Field(
        default=10000, ge=0,
        description="PostgreSQL idle_in_transaction_session_timeout of the rating transaction (SET "
        "LOCAL, so PgBouncer's transaction mode keeps it): a worker that stops sending inside its "
        "transaction (frozen, SIGSTOP, paused VM, cut off) loses its session and its row locks "
        "after this many ms; its messages are retried. 0: no bound.",
    )
    db_keepalives_idle: int = Field(
        default=10, ge=0,
        description="TCP keepalives of the worker's database connections, both ends (libpq "
        "keepalives_idle; the server's tcp_keepalives_idle during the rating transaction): seconds "
        "of silence before the first probe. 0: the system's defaults.",
    )
    db_keepalives_interval: int = Field(
        default=5, ge=0, description="Seconds between TCP keepalive probes (libpq keepalives_interval, "
        "server tcp_keepalives_interval). 0: the system's default.",
    )
    db_keepalives_count: int = Field(
        default=3, ge=0, description="Unanswered TCP keepalive probes before the connection is dropped "
        "(libpq keepalives_count, server tcp_keepalives_count). 0: the system's default.",
    )
    db_connect_timeout: int = Field(
        default=10, ge=2, le=300,
        description="Seconds a worker waits for a new database connection to be ready (libpq "
        "connect_timeout) before the attempt fails and is retried: a PostgreSQL or PgBouncer that "
        "froze (paused VM, SIGSTOP) still accepts the TCP connection in its kernel and never answers "
        "the startup; without it libpq waits for ever (psycopg: 130 s).",
    )
    db_tcp_user_timeout_ms: int = Field(
        default=30000, ge=0, le=3_600_000,
        description="Milliseconds data the worker sent to the database may stay unacknowledged by the "
        "peer's TCP stack before the connection is dropped (libpq tcp_user_timeout, Linux): notices a "
        "host that vanished or a network cut mid-query, where keepalives (idle connections only) do "
        "not. A frozen server process on a live host is noticed by the task time limit instead. "
        "0: the system's default.",
    )
    max_retries: int = Field(
        default=8, gt=0, description="In-process retries of a transient database error (lost connection, "
        "deadlock, serialization failure, lock timeout), with jittered exponential backoff from 50 ms to 2 s and "
        "at most 60 s (or half task_time_limit) in all; past them the message is requeued. Permanent errors are "
        "never retried."
    )
    pool_max_size: int = Field(default=4, gt=0, description="Connections per worker child's pool.")
    database_prepared_statements: bool = Field(
        default=False,
        description="The rating path's connections prepare their statements on the server (psycopg's "
        "prepare_threshold=0) and the rating transaction runs them with generic plans "
        "(plan_cache_mode=force_generic_plan, SET LOCAL): a transaction that commits skips parsing "
        "and planning, about half of PostgreSQL's CPU in a transaction of one match. Turn it on "
        "when RATINGS_DATABASE_URL reaches PostgreSQL directly (or PgBouncer 1.22+ with "
        "max_prepared_statements > 0). Off by default: behind a transaction-mode PgBouncer that "
        "does not track them, a prepared statement lives in one server session that other clients "
        "share, and a client could run another's statement of the same name.",
    )
    relay_batch_size: int = Field(default=500, gt=0, description="Outbox rows the relay publishes per round.")
    metrics_port: int = Field(default=9100, gt=0, description="Worker HTTP port: /metrics, /healthz, /readyz.")
    relay_metrics_port: int = Field(default=9101, gt=0, description="Relay HTTP port: /metrics, /healthz, /readyz.")
    api_database_url: str | None = Field(
        default=None,
        description="PostgreSQL URL of the read API (`ratings api`): a read replica, and a login role "
        "granted ratings_api (reads only). Unset: RATINGS_DATABASE_URL.",
    )
    api_tokens: str | None = Field(
        default=None,
        description="Bearer tokens the read API accepts on /v1/ (comma-separated; a request then needs "
        "`Authorization: Bearer TOKEN`). Unset: /v1/ is open. /health, /metrics and the leaderboard "
        "page never ask for one.",
    )
    api_port: int = Field(default=8080, gt=0, le=65535, description="Port `ratings api` listens on.")
    api_pool_max_size: int = Field(
        default=8, gt=0, description="Connections in the read API process's pool (requests beyond wait)."
    )
    api_page: bool = Field(default=True, description="Serve the leaderboard page (/ladders/...) from `ratings api`.")
    relay_max_lag: float = Field(
        default=60.0, gt=0, description="Relay readiness fails when the oldest unpublished event is older (seconds)."
    )
    outbox_retention_days: float = Field(
        default=7.0, gt=0,
        description="How long the outbox keeps published events for consumers to backfill from (days); "
        "`ratings outbox prune` deletes older ones. A consumer away longer takes a snapshot of current ratings.",
    )
    consumer_lag_threshold: int = Field(
        default=10_000, ge=0,
        description="`ratings doctor` flags a consumer group with more entries than this undelivered or pending.",
    )
    consumer_pending_max_age: float = Field(
        default=300.0, gt=0,
        description="`ratings doctor` flags a consumer group whose oldest pending entry is older (seconds).",
    )
    lock_deferrals_threshold: int = Field(
        default=10, ge=1,
        description="`ratings doctor` names a player whose row held elsewhere deferred at least this many "
        "matches within lock_deferrals_window seconds (a stuck session or a frozen worker holds it).",
    )
    lock_deferrals_window: float = Field(
        default=600.0, gt=0, description="Seconds of player lock waits `ratings doctor` looks back over.",
    )
    log_json: bool | None = Field(
        default=None, description="JSON log lines (true/false); unset: JSON unless attached to a terminal."
    )
    log_level: str = Field(default="INFO", description="Log level of the worker and the relay.")
    fault_injection: str | None = Field(
        default=None,
        description="Test-only: SIGKILL (or SIGSTOP) this process at named points (see worker/service/faults.py). "
                    "Never set it in production.",
    )
    relay_idle_wait: float = Field(
        default=1.0, gt=0, description="Seconds the relay waits for NOTIFY before polling the outbox again."
    )
    relay_database_deadline: float = Field(
        default=10.0, ge=2.0, le=300.0,
        description="Seconds each of the relay's database calls (connecting, taking a batch, "
        "committing it, the leadership lock) may take before the relay gives the connection up, "
        "logs a WARNING naming the database (once per outage; an INFO when it answers again) and "
        "reconnects with backoff. A PostgreSQL that freezes (paused VM, SIGSTOP) keeps its sockets "
        "open and its kernel acknowledges TCP, so keepalives, tcp_user_timeout and the server-side "
        "statement_timeout never fire: only this client-side deadline notices it. Above the "
        "slowest healthy round (a batch of relay_batch_size rows); at least 2 (libpq's "
        "connect_timeout, whole seconds, rounds it down).",
    )
    batch_size: int = Field(
        default=100, ge=1, le=1000,
        description="Most matches a worker child applies in one database transaction "
        "(worker/batching.py). 1: one Celery task per message, one transaction per match (no "
        "batching). Each worker child reserves 2 x batch_size messages ahead (at least "
        "prefetch_multiplier), so one batch can fill while the previous one is applied.",
    )
    batch_flush_interval: float = Field(
        default=0.002, ge=0, le=1.0,
        description="Seconds a message may wait in a worker's buffer for more messages while a "
        "child is idle (a full batch, or a child finishing its batch, flushes at once). Short: it "
        "adds to every message's latency when the queue is nearly empty.",
    )

    poll_linger: float = Field(
        default=0.025, ge=0, le=0.5,
        description="Seconds a worker waits before its next Redis poll when the last one took messages "
        "and left the queue empty (worker/service/transport.py): what arrives meanwhile is taken in one "
        "round trip and applied as one batch, so at moderate load batches carry several matches. Adds "
        "at most this to a message's wait; an idle or deep queue never lingers. 0: no linger.",
    )

    @field_validator("database_url", "direct_database_url", "api_database_url")
    @classmethod
    def _postgresql_url(cls, value: str | None, info) -> str | None:
        if value and not value.startswith(("postgresql://", "postgres://")):
            raise ValueError(f"RATINGS_{info.field_name.upper()}={_scheme_only(value)} must be a PostgreSQL URL "
                             "(postgresql://user@host:5432/dbname)")
        return value

    @field_validator("broker_url")
    @classmethod
    def _broker_url(cls, value: str | None) -> str | None:
        if value and not value.startswith(REDIS_SCHEMES + AMQP_SCHEMES):
            raise ValueError(f"RATINGS_BROKER_URL={_scheme_only(value)} must be a Redis URL "
                             "(redis://host:6379/0, rediss:// for TLS, sentinel://host:26379?master_name=NAME) "
                             "or a RabbitMQ URL (amqp://user:password@host:5672/vhost, amqps:// for TLS)")
        _check_sentinel_url(value)
        return value

    @field_validator("events_redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value and not value.startswith(REDIS_SCHEMES):
            raise ValueError(f"RATINGS_EVENTS_REDIS_URL={_scheme_only(value)} must be a Redis URL "
                             "(redis://host:6379/0, rediss:// for TLS, sentinel://host:26379?master_name=NAME)")
        _check_sentinel_url(value)
        return value

    @model_validator(mode="after")
    def _visibility_above_time_limit(self) -> Settings:
        if self.visibility_timeout <= self.task_time_limit:
            raise ValueError(
                f"RATINGS_VISIBILITY_TIMEOUT ({self.visibility_timeout} s) must exceed RATINGS_TASK_TIME_LIMIT "
                f"({self.task_time_limit} s), or Redis redelivers a task that is still running"
            )
        if self.batch_size > 1:
            # A reserved message may wait in the buffer while its child applies the batch before
            # it (at most one time limit), then be applied in its own batch (another time limit).
            reserved_for = 2 * self.task_time_limit + self.batch_flush_interval
            if self.visibility_timeout <= reserved_for:
                raise ValueError(
                    f"RATINGS_VISIBILITY_TIMEOUT ({self.visibility_timeout} s) must exceed twice "
                    f"RATINGS_TASK_TIME_LIMIT plus RATINGS_BATCH_FLUSH_INTERVAL ({reserved_for:g} s) when "
                    f"RATINGS_BATCH_SIZE > 1: a buffered message waits for the batch before its own, and "
                    f"Redis would redeliver it meanwhile; raise the visibility timeout or lower the time limit"
                )
        from worker.tls import ca_file_refusal, unreadable_ca_file

        for setting, url, ca_file in (
            ("RATINGS_BROKER_CA_FILE" if self.broker_is_rabbitmq else "RATINGS_BROKER_URL", self.broker_url,
             self.broker_ca_file if self.broker_is_rabbitmq else None),
            ("RATINGS_EVENTS_REDIS_URL", self.events_redis_url, None),
        ):
            unreadable = unreadable_ca_file(url, ca_file)
            if unreadable is not None:
                raise ValueError(ca_file_refusal(unreadable, setting))
        if self.broker_is_rabbitmq and self.rabbitmq_consumer_timeout <= self.longest_hold:
            raise ValueError(
                f"RATINGS_RABBITMQ_CONSUMER_TIMEOUT ({self.rabbitmq_consumer_timeout:g} s, the broker's "
                f"consumer_timeout) must exceed the longest a worker holds a message unacknowledged "
                f"({self.longest_hold:g} s: the batch before its own and its own, each within "
                f"RATINGS_TASK_TIME_LIMIT, plus deferrals, a quarter of RATINGS_VISIBILITY_TIMEOUT), or "
                f"RabbitMQ closes the worker's channel and redelivers everything it holds; raise "
                f"consumer_timeout on the broker (and this setting with it) or lower the time limit"
            )
        return self

    @property
    def broker_is_rabbitmq(self) -> bool:
        """True when ``broker_url`` is a RabbitMQ (AMQP 0-9-1) URL: ``amqp://`` or ``amqps://``."""
        return is_rabbitmq(self.broker_url)

    @property
    def events_url(self) -> str | None:
        """The Redis URL of the event stream: ``events_redis_url``, else ``broker_url`` when that is
        Redis; ``None`` when neither is set (or the broker is RabbitMQ and no events Redis is set)."""
        if self.events_redis_url:
            return self.events_redis_url
        return None if self.broker_is_rabbitmq else self.broker_url

    @property
    def longest_hold(self) -> float:
        """Most seconds a worker holds a reserved message unacknowledged: one time limit (two
        with batching: the batch before its own, plus the flush interval), plus deferrals (held
        a quarter of ``visibility_timeout`` in all, :mod:`worker.service.deferral`)."""
        runs = self.task_time_limit if self.batch_size == 1 else 2 * self.task_time_limit + self.batch_flush_interval
        return runs + self.visibility_timeout / 4

    @property
    def api_url(self) -> str | None:
        """The read API's database URL: ``api_database_url``, else ``database_url``."""
        return self.api_database_url or self.database_url

    @property
    def api_token_set(self) -> frozenset[str]:
        """The bearer tokens of ``api_tokens`` (empty: no token asked)."""
        return frozenset(t.strip() for t in (self.api_tokens or "").split(",") if t.strip())

    @property
    def session_database_url(self) -> str | None:
        """The URL of connections that keep session state (relay, rebuild): ``direct_database_url``
        when set, else ``database_url``."""
        return self.direct_database_url or self.database_url

    @property
    def reserved_per_child(self) -> int:
        """Messages one worker child may hold reserved (Celery's prefetch multiplier): with
        batching, two batches (one being applied, one filling), else ``prefetch_multiplier``."""
        if self.batch_size == 1:
            return self.prefetch_multiplier
        return max(self.prefetch_multiplier, 2 * self.batch_size)


def _check_sentinel_url(value: str | None) -> None:
    """Raise :class:`worker.redis_url.InvalidSentinelUrl` (a ``ValueError``) naming what to add when
    ``value`` is a malformed ``sentinel://`` URL."""
    if value and value.startswith("sentinel://"):
        from worker.redis_url import parse_sentinel_url

        parse_sentinel_url(value)


def _scheme_only(url: str) -> str:
    """``url`` cut after its scheme (``mysql://...``): an error message never shows a password."""
    scheme, sep, _ = url.partition("://")
    return f"{scheme}://..." if sep else repr(url[:20])


class SettingNotSet(RuntimeError):
    """A URL setting that a component needs is unset (``ratings`` commands check theirs at start:
    this is raised where a component is reached without that check, e.g. from Python)."""


def required_url(url: str | None, variable: str) -> str:
    """``url`` (a URL setting's value) when it is set; raise :class:`SettingNotSet` naming
    ``variable`` (its environment variable, ``RATINGS_DATABASE_URL``) when it is ``None`` or empty.

    For the services (worker, relay, doctor), which the ``ratings`` commands start only after
    checking their URLs (:mod:`worker.cli.common`): the URLs are Optional in :class:`Settings`
    because ``ratings demo`` and the tests start embedded servers when they are unset."""
    if not url:
        raise SettingNotSet(f"{variable} is not set (only `ratings demo` starts embedded servers)")
    return url


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once from the environment."""
    return Settings()
