"""Redis clients from a broker URL, plain or through Redis Sentinel.

A plain URL (``redis://``, ``rediss://``, ``unix://``) names one server. A Sentinel URL names the
Sentinels of a replicated Redis and the name of its primary, in kombu's form with the primary's
name as a query parameter::

    sentinel://[:password@]host1:26379/0?master_name=ratings;sentinel://host2:26379;sentinel://host3:26379

Each ``;``-separated part is one Sentinel; ``master_name`` (required) and the database number and
password (those of the primary) may be given on any part, first one found wins. Every client made
here asks the Sentinels for the current primary when it connects, so workers, the relay, the
producer and the operator commands follow a failover (redis-py's ``SentinelConnectionPool``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

SENTINEL_SCHEME = "sentinel"


class InvalidSentinelUrl(ValueError):
    """A ``sentinel://`` broker URL without ``master_name`` or without a Sentinel address
    (reason code ``invalid_sentinel_url``)."""

    reason = "invalid_sentinel_url"


@dataclass(frozen=True, slots=True)
class SentinelUrl:
    """The parts of a Sentinel broker URL: Sentinel addresses ``(host, port)``, the primary's
    name, its database number and password (``None``: none)."""

    sentinels: tuple[tuple[str, int], ...]
    master_name: str
    db: int
    password: str | None


def is_sentinel(url: str | None) -> bool:
    """True when ``url`` is a ``sentinel://`` broker URL."""
    return bool(url) and urlsplit(str(url).split(";", 1)[0]).scheme == SENTINEL_SCHEME


def parse_sentinel_url(url: str) -> SentinelUrl:
    """Split a ``sentinel://...;sentinel://...`` URL (see the module doc).

    Raises :class:`InvalidSentinelUrl` when no part names a host, none gives ``master_name``, a
    port is not a number from 1 to 65535 or the database not a number, 0 or more.
    Sentinels without a port use 26379.
    """
    sentinels: list[tuple[str, int]] = []
    master_name: str | None = None
    db: int | None = None
    password: str | None = None
    for part in filter(None, (p.strip() for p in url.split(";"))):
        split = urlsplit(part)
        if split.scheme != SENTINEL_SCHEME or not split.hostname:
            shown = split.scheme or part.rpartition("@")[2][:40]  # never the part's user or password
            raise InvalidSentinelUrl(f"{shown!r}: every part of a Sentinel URL is "
                                     "sentinel://host:port (invalid_sentinel_url)")
        try:
            port = split.port or 26379
        except ValueError as exc:  # a port that is not a number, or out of range
            raise InvalidSentinelUrl(f"{split.netloc.rpartition('@')[2]!r}: a Sentinel's port is a number "
                                     f"from 1 to 65535 ({exc}) (invalid_sentinel_url)") from None
        sentinels.append((split.hostname, port))
        query = parse_qs(split.query)
        master_name = master_name or next(iter(query.get("master_name", [])), None)
        if db is None and split.path.strip("/"):
            if not split.path.strip("/").isdigit():
                raise InvalidSentinelUrl(f"{split.path!r}: the database after the Sentinel's address is a "
                                         "number, 0 or more (sentinel://host:26379/0) (invalid_sentinel_url)")
            db = int(split.path.strip("/"))
        if password is None and split.password:
            password = unquote(split.password)
    if not sentinels or not master_name:
        raise InvalidSentinelUrl("a Sentinel broker URL names the primary: add ?master_name=NAME "
                                 "(the name in the Sentinels' 'sentinel monitor' line) (invalid_sentinel_url)")
    return SentinelUrl(tuple(sentinels), master_name, db or 0, password)


def kombu_url(url: str) -> str:
    """``url`` as kombu takes it: a Sentinel URL without its ``master_name`` parameters (kombu
    passes URL query parameters to its connection, which refuses that one; the name goes in the
    transport options instead). Other URLs unchanged."""
    if not is_sentinel(url):
        return url
    parts = []
    for part in url.split(";"):
        split = urlsplit(part.strip())
        query = "&".join(q for q in split.query.split("&") if q and not q.startswith("master_name="))
        parts.append(split._replace(query=query).geturl())
    return ";".join(parts)


def sentinel_connection_kwargs(**socket_options: Any) -> dict[str, Any]:
    """Keyword arguments of the connections to the Sentinels themselves (redis-py ``sentinel_kwargs``):
    ``socket_options`` (timeouts) and no retry of their own. redis-py (>= 6) retries every
    connection 3 times with exponential backoff by default, and asks the Sentinels one after the
    other, so three Sentinels that do not answer took 11.9 s to report it (measured, redis-py 8.1):
    a Sentinel that does not answer is skipped at once, and the caller's own retry (kombu's publish
    policy, the worker's broker reconnects, the relay's backoff) waits between rounds."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    return {**socket_options, "retry": Retry(NoBackoff(), 0)}


BLOCKING_POLL_SECONDS = 1  # kombu.transport.redis.Transport.brpop_timeout
"""Server-side timeout of the workers' blocking poll (kombu's ``brpop_timeout``, the transport's
``BLMOVE``): a live server answers it within this, so every socket timeout stays above it."""


def broker_socket_options(timeout: float, health_check_interval: int) -> dict[str, Any]:
    """kombu Redis transport options that notice a broker that goes silent (frozen, paused, cut
    off without a reset): ``socket_timeout``/``socket_connect_timeout`` of ``timeout`` seconds on
    every command and connection, TCP keepalives (a vanished host; a frozen process's kernel still
    answers them), and ``health_check_interval`` seconds between kombu's checks of the waiting
    poll, which has no socket timeout (it runs on the event loop): one overdue by more than
    :data:`BLOCKING_POLL_SECONDS` + ``health_check_interval`` is dropped and reconnected.

    ``retry_on_timeout`` stays off: a retry on a frozen server doubles the wait, and a retried
    push could be applied twice by the server. Raises ``ValueError`` when ``timeout`` is not above
    :data:`BLOCKING_POLL_SECONDS` (the poll would time out on a live, idle server).
    """
    if timeout <= BLOCKING_POLL_SECONDS:
        raise ValueError(f"socket timeout {timeout:g} s: must exceed the {BLOCKING_POLL_SECONDS} s blocking poll")
    return {"socket_timeout": timeout, "socket_connect_timeout": timeout, "socket_keepalive": True,
            "health_check_interval": health_check_interval}


def short_error(exc: BaseException) -> str:
    """``exc``'s message on one line without the connection-pool reprs redis-py appends to
    ``MasterNotFoundError`` (one per Sentinel, each hundreds of characters)."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text.split(" : <redis.client.Redis", 1)[0]


StreamFields = Mapping[bytes | str, bytes | str]


def stream_entries(page: Sequence[tuple[bytes | str | None, StreamFields | None]] | None
                   ) -> list[tuple[str, StreamFields]]:
    """An ``XRANGE``/``XREVRANGE`` reply as ``(entry id as text, fields)`` pairs, oldest or newest
    first as given; ``[]`` for an empty reply.

    redis-py types every entry's id as ``bytes | str | None`` and its fields as optional (``XCLAIM``
    and ``XREADGROUP`` return an entry deleted from the stream with no fields), whatever the
    client's ``decode_responses``; a range reply never holds such an entry, and one is left out."""
    return [(entry_id.decode() if isinstance(entry_id, bytes) else entry_id or "", fields)
            for entry_id, fields in page or () if fields is not None]


def redis_client(url: str, **kwargs: Any):
    """A ``redis.Redis`` for the broker at ``url``; ``kwargs`` go to the client (socket timeouts,
    ``decode_responses``).

    A Sentinel URL gives a client of the current primary (``Sentinel.master_for``): each new
    connection asks the Sentinels, so the client follows a failover. Raises
    :class:`InvalidSentinelUrl` for a malformed Sentinel URL.
    """
    import redis
    from redis.sentinel import Sentinel

    if not is_sentinel(url):
        return redis.Redis.from_url(url, **kwargs)
    parts = parse_sentinel_url(url)
    sentinel_kwargs = sentinel_connection_kwargs(**{k: v for k, v in kwargs.items() if k.startswith("socket_")})
    sentinel = Sentinel(list(parts.sentinels), sentinel_kwargs=sentinel_kwargs)
    return sentinel.master_for(parts.master_name, db=parts.db, password=parts.password, **kwargs)


def keep_rediss_default(app, broker_url: str) -> None:
    """After ``app.conf.broker_transport`` was set explicitly: restore kombu's default for a
    ``rediss://`` URL without ``ssl_*`` parameters (no certificate check), which an explicit
    transport replaces (kombu applies it only for the transport the URL scheme names)."""
    from ssl import CERT_NONE

    url = urlsplit(broker_url)
    if url.scheme == "rediss" and not any(k.startswith("ssl_") for k in parse_qs(url.query)):
        app.conf.broker_use_ssl = {"ssl_cert_reqs": CERT_NONE}
