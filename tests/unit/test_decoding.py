"""The worker's one-pass body decoder (:func:`worker.service.decoding.loads`) against the two-pass
definition it replaced: ``json.loads`` of the body, then each non-string argument replaced by its
exact text in the body (:func:`worker.service.decoding._argument_spans`)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.profiles import examples
from worker.service.decoding import _argument_spans, loads


def two_pass(text: str):
    """The decoder before the one-pass path: the reference of this test."""
    value = json.loads(text)
    if isinstance(value, list) and len(value) == 3 and isinstance(value[0], list) and value[0]:
        spans = _argument_spans(text)
        if spans is not None and len(spans) == len(value[0]):
            value[0] = [arg if isinstance(arg, str) else text[start:end]
                        for arg, (start, end) in zip(value[0], spans)]
    return value


def outcome(fn, text):
    try:
        return ("value", fn(text))
    except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError
        return ("error", type(exc).__name__)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
space = st.sampled_from(["", " ", "\n", "\t ", "\r\n  "])


@st.composite
def task_bodies(draw):
    """A task body ``[[args], kwargs, embed]`` written with random whitespace and separators, then
    maybe damaged (cut, an extra character, a fourth element)."""
    def enc(v):
        return json.dumps(v, separators=draw(st.sampled_from([(",", ":"), (", ", ": ")])),
                          ensure_ascii=draw(st.booleans()))
    w = lambda: draw(space)  # noqa: E731
    args = draw(st.lists(json_values, max_size=3))
    inner = ("," + w()).join(w() + enc(a) + w() for a in args)
    parts = [w() + "[" + inner + "]" + w(), w() + enc(draw(json_values)) + w(), w() + enc(draw(json_values)) + w()]
    if draw(st.booleans()) and draw(st.booleans()):
        parts.append(enc(draw(json_values)))
    text = w() + "[" + ",".join(parts) + "]" + w()
    damage = draw(st.sampled_from(["none", "none", "cut", "append", "prepend"]))
    if damage == "cut" and text:
        text = text[:draw(st.integers(0, len(text) - 1))]
    elif damage == "append":
        text += draw(st.sampled_from(["]", ",", "x", " 1", "\ufeff"]))
    elif damage == "prepend":
        text = draw(st.sampled_from(["\ufeff", "x", "[", " "])) + text
    return text


@settings(max_examples=examples(600))
@given(task_bodies())
def test_the_one_pass_decoder_agrees_with_the_two_pass_one(text):
    assert outcome(loads, text) == outcome(two_pass, text)


@settings(max_examples=examples(300))
@given(json_values.map(json.dumps))
def test_any_other_json_document_decodes_as_json_loads_does(text):
    assert outcome(loads, text) == outcome(two_pass, text)


@pytest.mark.parametrize("text, args", [
    # each non-string argument is its exact text (whitespace, key order, escapes as sent)
    ('[[{"b": 1,  "a":"\\u00e9"}], {}, {"callbacks": null}]', ['{"b": 1,  "a":"\\u00e9"}']),
    # a type marker stays plain JSON text, not a datetime
    ('[[{"player_id": {"__type__": "datetime", "__value__": "2026-01-01T00:00:00"}}], {}, {}]',
     ['{"player_id": {"__type__": "datetime", "__value__": "2026-01-01T00:00:00"}}']),
    # a JSON string argument is the string it encodes (the older "JSON text as a string" form)
    ('[["{\\"match_id\\": \\"m1\\"}", 7], {}, {}]', ['{"match_id": "m1"}', "7"]),
])
def test_arguments_come_back_as_sent(text, args):
    assert loads(text)[0] == args
    assert loads(text.encode("utf-8"))[0] == args
