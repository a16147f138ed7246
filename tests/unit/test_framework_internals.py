"""Every private attribute of Celery, kombu, billiard and redis-py that the worker's adapters rely on,
checked against the installed versions.

The Redis transport (worker/service/transport.py, transport_scripts.py), the consumer that keeps
dropped messages as dead letters (gate.py), the batching strategy (batching.py), the health check's
consumer state (tasks.py), the JSON decoder (decoding.py) and the producer that waits for replicas
(worker/producer.py) subclass framework classes, override their private methods and read their
private attributes. None of these is a documented interface: a new minor release may rename or
re-sign any of them without a deprecation. :data:`INTERNALS` lists each one with the parameters the
adapter expects, and the test fails naming the one that is missing or changed. Run it (and the
fault suite) before raising a Celery, kombu or redis-py bound (``docs/development/index.md``,
"Supported versions and upgrading").

Four kinds of entry:

* ``override``: a method the adapter overrides; its parameters must be exactly these, because the
  framework calls it with them;
* ``call``: a function or method the adapter calls; it must accept these parameters by name;
* ``attribute``: a class or module attribute the adapter reads, sets or extends;
* ``instance``: an attribute the framework assigns to its instances in the named method, checked
  in that method's source unless the class has it (a property in some releases).
"""

from __future__ import annotations

import importlib
import inspect
import re
from dataclasses import dataclass
from typing import Any

import pytest
from kombu.transport import redis as kombu_redis

from worker import producer
from worker.service import gate, transport


@dataclass(frozen=True)
class Internal:
    """One framework attribute: ``where`` is ``module`` or ``module:Class`` (dots for a nested
    class), ``used_by`` the adapter that relies on it."""

    kind: str
    where: str
    name: str
    used_by: str
    params: str = ""
    """override: the parameters, exactly (``"self, queue, *args, **kwargs"``); call: those the
    adapter passes by name (a comma-separated subset); instance: the method that assigns it."""

    @property
    def label(self) -> str:
        return f"{self.where}.{self.name}"


def override(where: str, name: str, params: str, used_by: str) -> Internal:
    return Internal("override", where, name, used_by, params)


def call(where: str, name: str, params: str, used_by: str) -> Internal:
    return Internal("call", where, name, used_by, params)


def attribute(where: str, name: str, used_by: str) -> Internal:
    return Internal("attribute", where, name, used_by)


def instance(where: str, name: str, assigned_in: str, used_by: str) -> Internal:
    return Internal("instance", where, name, used_by, assigned_in)


KR = "kombu.transport.redis"
VB = "kombu.transport.virtual.base"
TR = "worker/service/transport.py"
BA = "worker/service/batching.py"
GA = "worker/service/gate.py"
PR = "worker/producer.py"

INTERNALS: list[Internal] = [
    # -- kombu's Redis QoS (transport.QoS)
    override(f"{KR}:QoS", "append", "self, message, delivery_tag", f"{TR} QoS.append"),
    override(f"{VB}:QoS", "append", "self, message, delivery_tag", f"{TR} QoS.append (virtual bookkeeping)"),
    call(f"{VB}:QoS", "ack", "self, delivery_tag", f"{TR} QoS.ack_many"),
    override(f"{KR}:QoS", "restore_unacked", "self, client", f"{TR} QoS.restore_unacked"),
    override(f"{KR}:QoS", "restore_visible", "self, start, num, interval", f"{TR} QoS.restore_visible"),
    instance(f"{KR}:QoS", "_vrestore_count", "__init__", f"{TR} QoS.restore_visible"),
    call(f"{KR}:QoS", "pipe_or_acquire", "self", f"{TR} QoS.ack_many"),
    attribute(f"{KR}:QoS", "unacked_key", f"{TR} the claim scripts' keys"),
    attribute(f"{KR}:QoS", "unacked_index_key", f"{TR} the claim scripts' keys"),
    attribute(f"{KR}:QoS", "visibility_timeout", f"{TR} QoS.restore_visible"),
    instance(f"{VB}:QoS", "channel", "__init__", f"{TR} QoS"),
    call(f"{VB}:QoS", "can_consume_max_estimate", "self", f"{TR} Channel._room"),
    instance(f"{VB}:Message", "_raw", "__init__", f"{TR} QoS.append (the unacked value)"),
    # -- kombu's Redis Channel (transport.Channel; producer._WaitForReplicas)
    attribute(f"{KR}:Channel", "QoS", f"{TR} Channel.QoS"),
    attribute(f"{KR}:Channel", "priority_steps", f"{TR} Channel.priority_steps"),
    attribute(f"{KR}:Channel", "from_transport_options", f"{TR}, {PR} (poll_linger, wait_replicas)"),
    attribute(f"{KR}:SentinelChannel", "from_transport_options", f"{TR}, {PR} (sentinel channels)"),
    override(f"{KR}:Channel", "__init__", "self, *args, **kwargs", f"{TR} Channel.__init__"),
    override(f"{KR}:Channel", "conn_or_acquire", "self, client", f"{TR} Channel.conn_or_acquire"),
    call(f"{KR}:Channel", "_create_client", "self, asynchronous", f"{TR} Channel.conn_or_acquire"),
    attribute(f"{KR}:Channel", "pool", f"{TR} Channel._scripts, conn_or_acquire"),
    attribute(f"{KR}:Channel", "client", f"{TR} Channel._brpop_start/_brpop_read"),
    attribute(f"{KR}:Channel", "global_keyprefix", f"{TR} Channel._k"),
    attribute(f"{KR}:Channel", "sep", f"{TR} in-flight list names"),
    attribute(f"{KR}:Channel", "queue_order_strategy", f"{TR} (its cycle's consume and rotate)"),
    instance(f"{KR}:Channel", "_queue_cycle", "__init__", f"{TR} Channel._brpop_start/_brpop_read"),
    call("kombu.utils.scheduling:round_robin_cycle", "consume", "self, n", f"{TR} Channel._brpop_start"),
    call("kombu.utils.scheduling:round_robin_cycle", "rotate", "self, last_used", f"{TR} Channel._brpop_read"),
    instance(f"{KR}:Channel", "brpop_timeout", "__init__", f"{TR} Channel._brpop_start"),
    instance(f"{KR}:Channel", "connection_errors", "__init__", f"{TR} Channel._brpop_read, QoS.restore_unacked"),
    instance(f"{KR}:Channel", "active_fanout_queues", "__init__", f"{TR} Channel.basic_consume"),
    attribute(f"{KR}:Channel", "_in_poll", f"{TR} Channel._brpop_start/_brpop_read"),
    attribute(f"{KR}:Channel", "_brpop_sent_at", f"{TR} Channel._brpop_start (kombu's poll watchdog reads it)"),
    override(f"{KR}:Channel", "_brpop_start", "self, timeout", f"{TR} Channel._brpop_start"),
    override(f"{KR}:Channel", "_brpop_read", "self, **options", f"{TR} Channel._brpop_read"),
    call(f"{KR}:Channel", "_flush_brpop_reauth", "self", f"{TR} Channel._brpop_read"),
    override(f"{KR}:Channel", "_poll_error", "self, type, **options", f"{TR} Channel._poll_error"),
    override(f"{KR}:Channel", "_get", "self, queue", f"{TR} Channel._get"),
    call(f"{KR}:Channel", "_maybe_update_queues_expire", "self, client, queue", f"{TR} Channel._get"),
    override(f"{KR}:Channel", "_size", "self, queue", f"{TR} Channel._size"),
    override(f"{KR}:Channel", "_purge", "self, queue", f"{TR} Channel._purge"),
    override(f"{KR}:Channel", "_has_queue", "self, queue, **kwargs", f"{TR} Channel._has_queue"),
    override(f"{KR}:Channel", "_delete", "self, queue, exchange, routing_key, pattern, *args, **kwargs",
             f"{TR} Channel._delete"),
    override(f"{KR}:Channel", "basic_get", "self, queue, no_ack, **kwargs", f"{TR} Channel.basic_get"),
    override(f"{KR}:Channel", "basic_consume", "self, queue, *args, **kwargs", f"{TR} Channel.basic_consume"),
    override(f"{KR}:Channel", "close", "self", f"{TR} Channel.close"),
    override(f"{KR}:Channel", "_put", "self, queue, message, **kwargs", f"{PR} _WaitForReplicas._put"),
    call(f"{KR}:Channel", "_q_for_pri", "self, queue, pri", f"{PR} _WaitForReplicas._put"),
    call(f"{VB}:Channel", "_get_message_priority", "self, message, reverse", f"{PR} _WaitForReplicas._put"),
    call(f"{VB}:Channel", "basic_get", "self, queue, no_ack", f"{TR} Channel.basic_get (super)"),
    instance(f"{VB}:Channel", "connection", "__init__", f"{TR} Channel (its transport)"),
    instance(f"{VB}:Channel", "closed", "__init__", f"{TR} Channel.close"),
    attribute(f"{VB}:Channel", "qos", f"{TR} Channel._room, _take_more"),
    attribute(f"{VB}:Channel", "no_ack_consumers", f"{TR} Channel._take_more, _claim_and_take_more"),
    attribute(f"{KR}:Channel", "active_queues", f"{TR} Channel._brpop_start"),
    attribute(f"{KR}:Transport", "Channel", f"{TR} Transport.Channel, {PR} WaitingTransport.Channel"),
    attribute(f"{KR}:SentinelTransport", "Channel", f"{TR} SentinelTransport.Channel"),
    call(f"{VB}:Transport", "_deliver", "self, message, queue", f"{TR} Channel._brpop_read, _deliver_moved"),
    instance(f"{VB}:Transport", "_callbacks", "__init__", f"{TR} Channel._take_more, _claim_and_take_more"),
    attribute(KR, "GlobalKeyPrefixMixin", f"{TR} _cmd and Channel._scripts bypass it (keys already prefixed)"),
    # -- kombu's message, event loop, JSON registry
    attribute("kombu.message", "ACK_STATES", f"{BA} Batcher._ack_together sets _state = 'ACK'"),
    attribute("kombu.message:Message", "_state", f"{BA} Batcher._ack_together"),
    call("kombu.asynchronous", "get_event_loop", "", f"{TR} Channel._linger"),
    call("kombu.asynchronous.hub:Hub", "call_later", "self, delay, callback", f"{TR} Channel._linger"),
    call("kombu.serialization", "register", "name, encoder, decoder, content_type, content_encoding",
         "worker/service/decoding.py install (the application/json decoder)"),
    call("kombu.common:QoS", "increment_eventually", "self, n", f"{BA} Batcher._hold"),
    call("kombu.common:QoS", "decrement_eventually", "self, n", f"{BA} Batcher._retry_held"),
    call("kombu.asynchronous.timer:Timer", "call_after", "self, secs, fun", f"{BA} Batcher.add, _hold"),
    # -- redis-py (under the transport)
    call("redis:Redis", "execute_command", "self, *args, **options", f"{TR} _cmd (called unbound on kombu's client)"),
    call("redis:Redis", "parse_response", "self, connection, command_name, **options", f"{TR} Channel._brpop_read"),
    instance("redis.client:Redis", "connection", "__init__", f"{TR} the polling connection (client.connection)"),
    instance("redis.client:Redis", "connection_pool", "__init__", f"{TR} Channel._scripts, conn_or_acquire"),
    instance("redis.connection:ConnectionPool", "connection_kwargs", "__init__", f"{TR} Channel._scripts"),
    call("redis.connection:AbstractConnection", "send_command", "self, *args, **kwargs",
         f"{TR} Channel._brpop_start (EVALSHA, BLMOVE, BRPOP)"),
    call("redis.connection:AbstractConnection", "disconnect", "self, *args", f"{TR} Channel._brpop_read"),
    call("redis:Redis", "register_script", "self, script", "worker/service/transport_scripts.py Scripts.register"),
    call("redis.commands.core:Script", "__call__", "self, keys, args, client", f"{TR} the scripts' calls"),
    instance("redis.commands.core:Script", "sha", "__init__", f"{TR} Channel._brpop_start (EVALSHA by hand)"),
    instance("redis.commands.core:Script", "script", "__init__", "worker/service/transport_scripts.py Scripts.load"),
    attribute("redis.exceptions", "NoScriptError", f"{TR} Channel._brpop_read"),
    # -- Celery's consumer (gate.RatingsConsumer; the health check)
    attribute("celery.worker.consumer:Consumer", "Blueprint", f"{GA} _Blueprint"),
    attribute("celery.worker.consumer:Consumer.Blueprint", "default_steps", f"{GA} _Blueprint.default_steps"),
    override("celery.worker.consumer:Consumer", "on_decode_error", "self, message, exc", f"{GA} on_decode_error"),
    override("celery.worker.consumer:Consumer", "on_invalid_task", "self, body, message, exc",
             f"{GA} on_invalid_task"),
    override("celery.worker.consumer:Consumer", "on_unknown_task", "self, body, message, exc",
             f"{GA} on_unknown_task"),
    override("celery.worker.consumer:Consumer", "on_unknown_message", "self, body, message",
             f"{GA} on_unknown_message"),
    override("celery.worker.consumer:Consumer", "create_task_handler", "self, promise",
             f"{GA} create_task_handler (passes its arguments through)"),
    instance("celery.worker.consumer:Consumer", "pool", "__init__", f"{BA} Batcher"),
    instance("celery.worker.consumer:Consumer", "hostname", "__init__", f"{BA} Batcher"),
    instance("celery.worker.consumer:Consumer", "timer", "__init__", f"{BA} Batcher"),
    instance("celery.worker.consumer:Consumer", "connection_errors", "__init__", f"{BA} Batcher.on_message"),
    instance("celery.worker.consumer:Consumer", "blueprint", "__init__", f"{BA} Batcher._running, the health check"),
    instance("celery.worker.consumer.events:Events", "event_dispatcher", "start", f"{BA} Batcher"),
    instance("celery.worker.consumer.tasks:Tasks", "qos", "start", f"{BA} Batcher._hold"),
    instance("celery.worker.consumer.connection:Connection", "connection", "start",
             "worker/service/tasks.py the health check"),
    instance("celery.bootsteps:Blueprint", "state", "start", f"{BA} Batcher._running, the health check"),
    attribute("celery.bootsteps", "RUN", f"{BA} Batcher._running, the health check"),
    # -- Celery's task strategy and requests (batching.strategy, Batcher)
    attribute("celery.app.task:Task", "Strategy", "worker/bootstrap.py (Strategy=batching.strategy)"),
    attribute("celery.app.task:Task", "Request", f"{BA} Batcher (its request class)"),
    call("celery.app.task:Task", "start_strategy", "self, app, consumer", f"{BA} strategy(task, app, consumer)"),
    call("celery.worker.strategy", "default", "task, app, consumer", f"{BA} strategy"),
    call("celery.worker.strategy", "hybrid_to_proto2", "message, body", f"{BA} Batcher.on_message"),
    call("celery.worker.strategy", "proto1_to_proto2", "message, body", f"{BA} Batcher.on_message"),
    call("celery.worker.request", "create_request_cls", "base, task, pool, hostname, eventer, app", f"{BA} Batcher"),
    call("celery.worker.request:Request", "__init__",
         "message, on_ack, on_reject, app, hostname, eventer, task, connection_errors, body, headers, decoded, utc",
         f"{BA} Batcher.on_message"),
    attribute("celery.worker.request:Request", "acknowledged", f"{BA} Batcher._ack_together"),
    call("celery.worker.request:Request", "reject", "self, requeue", f"{BA} Batcher._one"),
    call("celery.worker.state", "task_reserved", "request", f"{BA} Batcher.add"),
    call("celery.worker.state", "task_ready", "request", f"{BA} Batcher._settle"),
    call("celery:Celery", "uses_utc_timezone", "self", f"{BA} Batcher.on_message"),
    instance("celery.concurrency.base:BasePool", "limit", "__init__", f"{BA} Batcher.slots"),
    call("celery.concurrency.base:BasePool", "apply_async", "self, target, args, **options", f"{BA} Batcher._flush"),
    call("billiard.pool:Pool", "apply_async",
         "func, args, callback, error_callback, timeout, soft_timeout, correlation_id",
         f"{BA} Batcher._flush (options passed through by Celery's prefork pool)"),
]


def _resolve(where: str) -> Any:
    module_name, _, path = where.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in filter(None, path.split(".")):
        obj = getattr(obj, part)
    return obj


def _parameters(function: Any) -> list[str]:
    """``function``'s parameter names in order, ``*args`` and ``**kwargs`` with their stars."""
    return [("*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else "") + p.name
            for p in inspect.signature(function).parameters.values()]


def problem(entry: Internal) -> str | None:
    """What is wrong with ``entry`` in the installed frameworks (one sentence naming it), or None."""
    try:
        owner = _resolve(entry.where)
    except (ImportError, AttributeError) as exc:
        return f"{entry.where} is missing ({exc}); used by {entry.used_by}"
    if entry.kind == "instance":
        if hasattr(owner, entry.name):  # a class attribute or property in this release
            return None
        method = inspect.getattr_static(owner, entry.params, None)
        source = inspect.getsource(method) if method is not None else ""
        if not re.search(rf"\b\w+\.{re.escape(entry.name)}\s*(?::[^=\n]+)?=(?!=)", source):
            return (f"{entry.label} is no longer assigned in {entry.where}.{entry.params}; "
                    f"used by {entry.used_by}")
        return None
    try:
        inspect.getattr_static(owner, entry.name)
    except AttributeError:
        return f"{entry.label} is missing; used by {entry.used_by}"
    if entry.kind == "attribute":
        return None
    found = _parameters(getattr(owner, entry.name))
    expected = [p.strip() for p in entry.params.split(",") if p.strip()]
    if entry.kind == "override" and found != expected:
        return (f"{entry.label} changed its parameters: the override expects ({', '.join(expected)}), "
                f"found ({', '.join(found)}); used by {entry.used_by}")
    # named explicitly, not merely swallowed by a **kwargs (a renamed keyword would vanish into it)
    missing = [p for p in expected if p not in found]
    if entry.kind == "call" and missing:
        return (f"{entry.label} no longer takes {', '.join(missing)} (found ({', '.join(found)})); "
                f"used by {entry.used_by}")
    return None


@pytest.mark.parametrize("entry", INTERNALS, ids=lambda e: f"{e.kind}:{e.label}")
def test_the_framework_still_has_the_private_attribute_the_adapter_relies_on(entry):
    """Each listed attribute exists in the installed Celery, kombu, billiard or redis-py, with the
    parameters the adapter expects; the failure names the one that is missing or changed."""
    assert problem(entry) is None, problem(entry)


CONVENTIONS = [
    # (where, a regular expression its source must match, what relies on it)
    ("celery.worker.strategy:default", r"def task_message_handler\(message, body, ack, reject, callbacks,",
     f"{BA} Batcher.on_message(message, body, ack, reject, callbacks): the handler a strategy returns"),
    ("celery.worker.consumer:Consumer.create_task_handler",
     r"strategy\(\s*message, payload,\s*\w+,\s*\w+,\s*callbacks,",
     f"{BA} Batcher.on_message: how the consumer calls a strategy's handler"),
    ("celery.app.task:Task.start_strategy", r"instantiate\(self\.Strategy, self, app, consumer",
     f"{BA} strategy(task, app, consumer, **kwargs)"),
    ("kombu.transport.redis:PublishBatch.publish", r"_publish_batch=self",
     f"{PR} _WaitForReplicas._put: a batched publish is told apart by its _publish_batch keyword"),
]


@pytest.mark.parametrize(("where", "pattern", "used_by"), CONVENTIONS, ids=[c[0] for c in CONVENTIONS])
def test_the_framework_still_calls_the_adapter_the_way_it_expects(where, pattern, used_by):
    """Calling conventions no signature shows (a handler's arguments, a private keyword), read in
    the framework's source: the failure names the function whose call changed."""
    assert re.search(pattern, inspect.getsource(_resolve(where))), (
        f"{where} no longer matches {pattern!r}; used by {used_by}")


def test_the_consumer_blueprint_still_has_the_delayed_delivery_step_it_removes():
    """gate._Blueprint filters Celery's consumer steps by the name ending ":DelayedDelivery": a
    renamed step would be kept silently (28 RabbitMQ exchanges and queues declared again)."""
    steps = gate.Consumer.Blueprint.default_steps
    assert [s for s in steps if s.endswith(":DelayedDelivery")], steps
    assert not [s for s in gate._Blueprint.default_steps if s.endswith(":DelayedDelivery")]


def _framework_sources(cls: type) -> str:
    """The source of every framework module among ``cls``'s bases (not the worker's own)."""
    modules = {inspect.getmodule(base) for base in cls.__mro__[1:]
               if not base.__module__.startswith(("worker.", "builtins"))}
    return "\n".join(inspect.getsource(module) for module in modules if module is not None)


ADDED = [
    (transport.Channel, "the transport's channel"),
    (transport.QoS, "the transport's QoS"),
    (gate.RatingsConsumer, "the rating worker's consumer"),
    (producer._WaitingChannel, "the producer's replica-waiting channel"),
]


@pytest.mark.parametrize(("cls", "what"), ADDED, ids=lambda v: getattr(v, "__qualname__", ""))
def test_names_the_adapters_add_are_not_used_by_the_framework_classes_they_extend(cls, what):
    """An attribute an adapter adds (``_pending``, ``_lua``, ``_conn``, ...) must not be a name the
    framework already uses on that class: kombu's Channel assigns ``_registered`` in ``__init__``,
    so a field of that name would be overwritten, and a new kombu could start using any other."""
    relied_on = {e.name for e in INTERNALS}
    added = set(vars(cls)) | set(re.findall(r"\bself\.(\w+)\s*=(?!=)", inspect.getsource(cls)))
    sources = _framework_sources(cls)
    clashes = sorted(name for name in added if not name.startswith("__") and name not in relied_on
                     and re.search(rf"\.{re.escape(name)}\b|\bdef {re.escape(name)}\b", sources))
    inflight = "inflight_lists" if cls is transport.Channel else None  # set on kombu's Transport
    if inflight and re.search(rf"\.{inflight}\b", _framework_sources(kombu_redis.Transport)):
        clashes.append(inflight)
    assert clashes == [], f"{what} ({cls.__module__}) adds names the framework uses: {clashes}"


def test_the_sentinel_channel_overrides_nothing_the_transport_channel_overrides():
    """transport.SentinelChannel is (Channel, kombu's SentinelChannel): a method kombu's
    SentinelChannel defines that the transport's Channel also defines would be shadowed silently."""
    own = set(vars(transport.Channel)) - {"__doc__", "__module__", "__init__", "from_transport_options"}
    assert sorted(own & set(vars(kombu_redis.SentinelChannel))) == []


def test_the_check_names_a_missing_attribute_and_a_changed_signature():
    """The check can fail: a name the class lacks, parameters that differ from an override's, and a
    keyword a call passes that the function no longer takes are each reported by name."""

    assert problem(attribute(f"{KR}:Channel", "_no_such_thing", "x")) == (
        f"{KR}:Channel._no_such_thing is missing; used by x")
    changed = problem(override(f"{KR}:Channel", "_brpop_start", "self, timeout, extra", "x"))
    assert changed == (f"{KR}:Channel._brpop_start changed its parameters: the override expects "
                       "(self, timeout, extra), found (self, timeout); used by x")
    gone = problem(call("celery.worker.request:Request", "reject", "self, requeue, later", "x"))
    assert gone is not None and gone.startswith("celery.worker.request:Request.reject no longer takes later")
    unassigned = problem(instance(f"{KR}:Channel", "_no_such_field", "__init__", "x"))
    assert unassigned == f"{KR}:Channel._no_such_field is no longer assigned in {KR}:Channel.__init__; used by x"
