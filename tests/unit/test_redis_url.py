"""Sentinel broker URLs (worker.redis_url): their parts, kombu's form, the errors."""

from __future__ import annotations

import pytest

from worker.redis_url import InvalidSentinelUrl, is_sentinel, kombu_url, parse_sentinel_url
from worker.settings import Settings

URL = "sentinel://:s3cret@10.0.0.1:26379/2?master_name=ratings;sentinel://10.0.0.2:26380;sentinel://10.0.0.3"


def test_a_sentinel_url_gives_every_sentinel_the_primary_name_db_and_password():
    """Three Sentinels (the third on the default port 26379), the name, database 2, the password."""
    parts = parse_sentinel_url(URL)
    assert parts.sentinels == (("10.0.0.1", 26379), ("10.0.0.2", 26380), ("10.0.0.3", 26379))
    assert (parts.master_name, parts.db, parts.password) == ("ratings", 2, "s3cret")


def test_kombu_gets_the_url_without_master_name_and_plain_urls_unchanged():
    """kombu refuses unknown query parameters: the name goes to the transport options instead."""
    assert kombu_url(URL) == "sentinel://:s3cret@10.0.0.1:26379/2;sentinel://10.0.0.2:26380;sentinel://10.0.0.3"
    assert kombu_url("redis://h:6379/0?x=1") == "redis://h:6379/0?x=1"
    assert is_sentinel(URL) and not is_sentinel("redis://h:6379/0") and not is_sentinel(None)


@pytest.mark.parametrize("url", ["sentinel://10.0.0.1:26379", "sentinel://h:1?master_name=m;redis://h:2"])
def test_a_sentinel_url_without_master_name_or_with_a_foreign_part_is_refused_with_its_reason(url):
    """The error names the reason code and what to add or change."""
    with pytest.raises(InvalidSentinelUrl, match="invalid_sentinel_url"):
        parse_sentinel_url(url)


def test_settings_accept_a_sentinel_broker_url_and_refuse_one_without_master_name():
    """RATINGS_BROKER_URL=sentinel://... is a broker URL; without master_name it fails at start."""
    assert Settings(broker_url=URL).broker_url == URL
    with pytest.raises(ValueError, match="master_name"):
        Settings(broker_url="sentinel://10.0.0.1:26379")


def test_the_worker_takes_a_sentinel_url_through_the_no_loss_transport_with_the_primary_name():
    """The worker's Celery app: the Sentinel variant of worker.service.transport (not kombu's own
    SentinelChannel, which pops with BRPOP), the name in the transport options, kombu's URL form."""
    from celery import Celery

    from worker.service import celery_app, transport

    settings = Settings(broker_url=URL)
    app = celery_app.configure(Celery("t"), settings)
    celery_app.use_safe_redis_transport(app, settings)
    with app.connection_for_write() as conn:
        assert conn.transport.Channel is transport.SentinelChannel
        assert issubclass(transport.SentinelChannel, transport.Channel)
        assert conn.transport_options["master_name"] == "ratings"
        assert "master_name" not in app.conf.broker_url


@pytest.mark.parametrize(("url", "words"), [
    ("sentinel://10.0.0.1:abc?master_name=m", "port is a number"),
    ("sentinel://10.0.0.1:99999?master_name=m", "port is a number"),
    ("sentinel://10.0.0.1:26379/x?master_name=m", "database after the Sentinel's address is a number"),
    ("sentinel://10.0.0.1:26379/-1?master_name=m", "database after the Sentinel's address is a number"),
])
def test_a_sentinel_url_with_a_bad_port_or_database_is_refused_with_its_reason(url, words):
    """Not Python's own words (``invalid literal for int()``): the part, what it must be, the reason
    code; a negative database is refused here, not by the worker after it started."""
    with pytest.raises(InvalidSentinelUrl, match="invalid_sentinel_url") as caught:
        parse_sentinel_url(url)
    assert words in str(caught.value)


@pytest.mark.parametrize("url", [
    "sentinel://h1:26379?master_name=m;:s3cret@h2",
    "sentinel://h1:26379?master_name=m;redis://:s3cret@h2:6379",
    "sentinel://h1:26379?master_name=m;user:s3cret@h2:26379",
])
def test_a_malformed_sentinel_url_is_refused_without_showing_its_password(url):
    """Regression: a part without the sentinel:// scheme was quoted by its first 12 characters,
    password included (``':s3cret@h2'``); the error names the part's host only."""
    with pytest.raises(InvalidSentinelUrl, match="invalid_sentinel_url") as caught:
        parse_sentinel_url(url)
    assert "s3cret" not in str(caught.value)
    with pytest.raises(ValueError) as caught_settings:
        Settings(broker_url=url)
    assert "s3cret" not in str(caught_settings.value)


@pytest.mark.parametrize("url", [URL, "redis://10.0.0.1:6379/0", "rediss://10.0.0.1:6380/0"])
def test_the_worker_gives_up_a_silent_broker_connection_after_the_socket_timeout(url):
    """A frozen Redis never closes its sockets: the worker's broker connections carry the socket
    timeout and kombu's poll check interval from the settings, keepalives on, no retry of a
    command that timed out; through Sentinel, the Sentinels' connections the same timeout."""
    from celery import Celery

    from worker.service import celery_app

    settings = Settings(broker_url=url, redis_socket_timeout=7.5, redis_health_check_interval=3)
    app = celery_app.configure(Celery("t"), settings)
    celery_app.use_safe_redis_transport(app, settings)
    with app.connection_for_write() as conn:
        options = conn.transport_options
    assert (options["socket_timeout"], options["socket_connect_timeout"]) == (7.5, 7.5)
    assert (options["health_check_interval"], options["socket_keepalive"]) == (3, True)
    assert not options.get("retry_on_timeout")
    if is_sentinel(url):
        assert options["sentinel_kwargs"]["socket_timeout"] == 7.5


def test_a_socket_timeout_at_or_below_the_blocking_poll_is_refused():
    """The workers' poll blocks up to 1 s on the server: a socket timeout of 1 s or less would
    drop a live, idle broker's connection at every poll."""
    from pydantic import ValidationError

    from worker.redis_url import broker_socket_options

    with pytest.raises(ValidationError, match="redis_socket_timeout"):
        Settings(redis_socket_timeout=1.0)
    with pytest.raises(ValueError, match="must exceed the 1 s blocking poll"):
        broker_socket_options(1.0, 5)
    assert broker_socket_options(1.5, 5)["socket_timeout"] == 1.5
