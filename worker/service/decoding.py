"""The one decoding of a message body in the worker: plain JSON, no type markers, each task argument
kept as the exact text it was received as.

kombu's JSON decoder turns an object ``{"__type__": "datetime", "__value__": "..."}`` (and the
``date``, ``time``, ``decimal`` and ``uuid`` markers) into a Python object. The rating worker
received, through Celery, a match whose ``player_id`` was such a marker as a ``datetime`` and rated
the player ``"2026-01-01T00:00:00"``, while the same document as a plain JSON body was
``wrong_type``; and a dead letter kept ``repr()`` of what the decoder made, not the bytes received.

:func:`install` replaces the decoder of ``application/json`` in kombu's serializer registry of this
process with :func:`loads`. Every body the worker decodes goes through it, whatever produced it:
Celery's consumer in the main process (``message.payload``, the batching strategy included) and the
task in a pool child (``trace_task`` decodes the body it is handed). :func:`loads` is Python's
``json.loads`` (a type marker stays the plain JSON object it is, and the contract refuses it as for
any other producer, with the same reason code), and in a Celery protocol 2 task body
``[args, kwargs, embed]`` each positional argument that is not a JSON string is replaced by the
exact text of that argument in the body, so :func:`schemas.parse_match_finished` validates the
very bytes the producer sent, and a dead letter keeps them: a requeue publishes them again byte for
byte (:func:`worker.producer.task_body`). A JSON string argument stays the string it encodes (the
older "JSON text as a string" form): its content is validated as the message. Encoding is
unchanged (kombu's encoder).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, cast

from kombu import serialization
from kombu.utils.json import dumps

_WHITESPACE = re.compile(r"[ \t\n\r]*")
# `[ \t\n\r]*` matches (possibly nothing) at every position, so its match is never None: typed so
# once here rather than checked at each step of the decoder, which runs for every message received.
_whitespace_at = cast("Callable[[str, int], re.Match[str]]", _WHITESPACE.match)
_DECODER = json.JSONDecoder()

CONTENT_TYPE = "application/json"


def _first_argument(text: str) -> int | None:
    """Where the first element of the body's first array starts (past ``[[`` and whitespace), or
    None when the text does not start ``[[``."""
    i = _whitespace_at(text, 0).end()
    if text[i:i + 1] != "[":
        return None
    i = _whitespace_at(text, i + 1).end()
    if text[i:i + 1] != "[":
        return None
    return _whitespace_at(text, i + 1).end()


def _argument_spans(text: str) -> list[tuple[int, int]] | None:
    """(start, end) of each element of the body's first array, or None when the text is not
    ``[[...], ...`` (then nothing is replaced)."""
    i = _first_argument(text)
    if i is None:
        return None
    spans: list[tuple[int, int]] = []
    if text[i:i + 1] == "]":
        return spans
    while True:
        _, end = _DECODER.raw_decode(text, i)
        spans.append((i, end))
        i = _whitespace_at(text, end).end()
        if text[i:i + 1] == ",":
            i = _whitespace_at(text, i + 1).end()
            continue
        return spans if text[i:i + 1] == "]" else None


def _task_body(text: str) -> list | None:
    """``text`` decoded in one pass when it is exactly a task body ``[[args...], kwargs, embed]`` with
    at least one argument: each argument that is not a JSON string comes back as its exact text. None
    for any other text (valid or not): the caller then decodes it as :func:`json.loads` does.

    Each element is decoded once by the C decoder's ``raw_decode``, which also gives its span, so the
    body is not decoded a second time to find the arguments' text (the worker's main process decodes
    every message; the second pass was about 2 % of its samples at full load, py-spy). A text with
    more than 512 ``[`` and ``{`` goes to the two-pass path, so a nesting too deep for the decoder
    raises ``RecursionError`` exactly where :func:`json.loads` does (each element decoded from depth
    0 here would allow a few levels more)."""
    if text.count("[") + text.count("{") > 512:
        return None
    i = _first_argument(text)
    if i is None or text[i:i + 1] == "]":
        return None  # no argument: nothing to replace
    args: list[Any] = []
    try:
        while True:
            value, end = _DECODER.raw_decode(text, i)
            args.append(value if isinstance(value, str) else text[i:end])
            i = _whitespace_at(text, end).end()
            if text[i:i + 1] == ",":
                i = _whitespace_at(text, i + 1).end()
                continue
            if text[i:i + 1] != "]":
                return None
            break
        i += 1  # past the arguments' "]"
        rest: list[Any] = [args]
        for _ in range(2):  # kwargs, embed
            i = _whitespace_at(text, i).end()
            if text[i:i + 1] != ",":
                return None
            i = _whitespace_at(text, i + 1).end()
            value, i = _DECODER.raw_decode(text, i)
            rest.append(value)
        i = _whitespace_at(text, i).end()
        if text[i:i + 1] != "]" or _whitespace_at(text, i + 1).end() != len(text):
            return None
    except ValueError:
        return None
    return rest


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Decode one ``application/json`` message body: UTF-8 JSON text -> Python value.

    A task body (a JSON array ``[args, kwargs, embed]`` whose first element is an array) comes back
    with each non-string argument as ``str``: its exact JSON text in the body (whitespace, key
    order and escapes as sent). No type marker is interpreted. Raises ``UnicodeDecodeError`` or
    ``ValueError`` (``json.JSONDecodeError``) for a body that is not UTF-8 JSON: kombu reports it as
    a ``DecodeError`` and :mod:`worker.service.gate` keeps it as an ``undecodable_body`` dead letter.
    """
    text = data if isinstance(data, str) else bytes(data).decode("utf-8")
    body = _task_body(text)
    if body is not None:
        return body
    value = json.loads(text)
    if isinstance(value, list) and len(value) == 3 and isinstance(value[0], list) and value[0]:
        spans = _argument_spans(text)
        if spans is not None and len(spans) == len(value[0]):
            value[0] = [arg if isinstance(arg, str) else text[start:end]
                        for arg, (start, end) in zip(value[0], spans)]
    return value


def install() -> None:
    """Make :func:`loads` the decoder of ``application/json`` in this process (kombu's registry;
    the encoder stays kombu's). Idempotent; call it where the Celery app is configured, before the
    worker forks its children."""
    serialization.register("json", dumps, loads, content_type=CONTENT_TYPE, content_encoding="utf-8")
