"""RabbitMQ chosen by URL: the settings' checks and the Celery/producer configuration it gives (no server)."""

from __future__ import annotations

import pytest
from celery import Celery
from pydantic import ValidationError

from worker.service.celery_app import configure, use_rabbitmq_quorum_queue, use_safe_redis_transport
from worker.settings import Settings

AMQP = "amqp://guest:guest@127.0.0.1:5672/ratings"


def test_the_broker_url_chooses_redis_or_rabbitmq_and_refuses_anything_else():
    """redis://, rediss:// and amqp://, amqps:// are brokers; another scheme is refused naming both kinds."""
    assert not Settings(broker_url="redis://127.0.0.1:6379/0").broker_is_rabbitmq
    assert Settings(broker_url=AMQP).broker_is_rabbitmq
    assert Settings(broker_url="amqps://guest:guest@broker.example:5671/ratings").broker_is_rabbitmq
    with pytest.raises(ValidationError, match=r"must be a Redis URL .* or a RabbitMQ URL"):
        Settings(broker_url="sqs://key:secret@")


def test_the_event_stream_redis_is_the_broker_when_that_is_redis_and_must_be_named_on_rabbitmq():
    """events_url: RATINGS_EVENTS_REDIS_URL when set, else a Redis broker; none on RabbitMQ alone."""
    assert Settings(broker_url="redis://127.0.0.1:6379/3", events_redis_url=None).events_url == "redis://127.0.0.1:6379/3"
    assert Settings(broker_url=AMQP, events_redis_url=None).events_url is None
    assert Settings(broker_url=AMQP, events_redis_url="redis://10.0.0.5:6379/0").events_url == "redis://10.0.0.5:6379/0"
    with pytest.raises(ValidationError, match="RATINGS_EVENTS_REDIS_URL=amqp://... must be a Redis URL"):
        Settings(events_redis_url=AMQP)


def test_the_broker_consumer_timeout_must_exceed_the_longest_a_worker_holds_a_message():
    """Defaults (time limit 120 s, batching, visibility timeout 300 s): a message may be held
    2 x 120 + 0.002 (flush) + 300 / 4 (deferrals) = 315.002 s, so consumer_timeout 315 s is refused
    on RabbitMQ, 316 s accepted; on Redis the setting is not used."""
    with pytest.raises(ValidationError, match=r"RATINGS_RABBITMQ_CONSUMER_TIMEOUT \(315 s.*315\.002 s"):
        Settings(broker_url=AMQP, rabbitmq_consumer_timeout=315)
    assert Settings(broker_url=AMQP, rabbitmq_consumer_timeout=316).longest_hold == pytest.approx(315.002)
    assert Settings(broker_url="redis://127.0.0.1:6379/0", rabbitmq_consumer_timeout=10).rabbitmq_consumer_timeout == 10
    # without batching: one time limit, plus deferrals: 120 + 75 = 195 s
    with pytest.raises(ValidationError, match="195 s"):
        Settings(broker_url=AMQP, batch_size=1, rabbitmq_consumer_timeout=195)


def _worker_app(**fields) -> Celery:
    settings = Settings(**fields)
    app = configure(Celery("t"), settings)
    use_safe_redis_transport(app, settings)
    use_rabbitmq_quorum_queue(app, settings)
    return app


def test_a_rabbitmq_worker_declares_a_quorum_queue_and_confirms_publishes():
    """amqp://: kombu's py-amqp transport (not the project's Redis one), quorum queue, confirms."""
    app = _worker_app(broker_url=AMQP)
    assert app.conf.broker_transport is None
    assert app.conf.task_default_queue_type == "quorum"
    assert app.conf.broker_transport_options["confirm_publish"] is True
    [queue] = app.amqp.queues.values()
    assert queue.queue_arguments == {"x-queue-type": "quorum"} and queue.durable
    redis_app = _worker_app(broker_url="redis://127.0.0.1:6379/0")
    assert redis_app.conf.broker_transport == "worker.service.transport:Transport"
    assert redis_app.conf.task_default_queue_type == "classic"


def test_amqps_verifies_the_certificate_against_the_given_ca_and_the_urls_own_host_name(tmp_path):
    """The host name checked is the URL's, ``localhost`` included (kombu would check 127.0.0.1)."""
    from worker.producer import producer_app

    ca = tmp_path / "ca.pem"
    ca.write_text("a PEM file\n")
    app = _worker_app(broker_url="amqps://guest:guest@localhost:5671//", broker_ca_file=str(ca))
    assert app.conf.broker_use_ssl == {"context": {"cafile": str(ca), "check_hostname": True},
                                       "server_hostname": "localhost"}
    papp = producer_app("amqps://u:p@broker.example:5671/v", ca_file=None)
    assert papp.conf.broker_use_ssl["server_hostname"] == "broker.example"
    assert papp.conf.broker_transport_options["confirm_publish"] is True


@pytest.mark.parametrize(("fields", "setting"), [
    ({"broker_url": "amqps://guest:guest@localhost:5671//", "broker_ca_file": "/nonexistent/ca.pem",
      "events_redis_url": "redis://127.0.0.1:6379/0"}, "RATINGS_BROKER_CA_FILE"),
    ({"broker_url": "rediss://localhost:6380/0?ssl_cert_reqs=required&ssl_ca_certs=/nonexistent/ca.pem"},
     "RATINGS_BROKER_URL"),
    ({"broker_url": "redis://127.0.0.1:6379/0",
      "events_redis_url": "rediss://localhost:6380/0?ssl_ca_certs=/nonexistent/ca.pem"}, "RATINGS_EVENTS_REDIS_URL"),
])
def test_a_ca_file_that_cannot_be_read_is_refused_at_start_with_its_setting_and_reason(fields, setting):
    """Regression: a missing CA file made the worker retry its broker for ever ("Error 2 connecting
    to localhost:6380. No such file or directory", as if the server were a missing socket) and the
    producer retry 7.5 s and raise BrokerUnavailable without a reason (Redis) or report an untrusted
    certificate (RabbitMQ). Now the settings refuse it, naming the setting and the file."""
    with pytest.raises(ValueError, match="tls_ca_file_unreadable") as caught:
        Settings(**fields)
    assert setting in str(caught.value) and "/nonexistent/ca.pem" in str(caught.value)


@pytest.mark.parametrize(("url", "ca_file"), [
    ("amqps://guest:guest@localhost:5671//", "/nonexistent/ca.pem"),
    ("rediss://localhost:6380/0?ssl_cert_reqs=required&ssl_ca_certs=/nonexistent/ca.pem", None),
])
def test_the_producer_refuses_a_ca_file_that_cannot_be_read_at_once_with_its_reason(url, ca_file):
    """No connection is tried: BrokerTlsRefused with reason tls_ca_file_unreadable from producer_app."""
    from worker.producer import BrokerTlsRefused, producer_app

    with pytest.raises(BrokerTlsRefused) as caught:
        producer_app(url, ca_file=ca_file)
    assert caught.value.reason == "tls_ca_file_unreadable" and "/nonexistent/ca.pem" in str(caught.value)


def test_worker_and_producer_give_up_a_synchronous_amqp_wait_on_a_silent_node():
    """A RabbitMQ node that froze never answers a synchronous AMQP method (a channel's open or
    close, a queue declaration): the worker's connection gives up after one heartbeat interval,
    the producer's after its 5 s socket timeout (py-amqp read/write timeouts), and retry elsewhere."""
    from worker.producer import producer_app

    url = "amqp://guest:guest@10.0.0.1:5672//;amqp://guest:guest@10.0.0.2:5672//"
    settings = Settings(broker_url=url, events_redis_url="redis://h:6379/0", rabbitmq_heartbeat=7)
    app = configure(Celery("t"), settings)
    use_rabbitmq_quorum_queue(app, settings)
    options = app.conf.broker_transport_options
    assert (options["read_timeout"], options["write_timeout"], options["confirm_publish"]) == (7, 7, True)
    producer = producer_app(url, check_broker=False).conf.broker_transport_options
    assert (producer["read_timeout"], producer["write_timeout"], producer["confirm_publish"]) == (5.0, 5.0, True)
