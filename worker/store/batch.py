"""Store: the batch of the rating transaction and its first step, classification.

The entries of a batch (:class:`BatchMatch`, :class:`BatchDeadLetter`), their classification in
queue order against the ledger and the entries before them (:func:`classify`), and the rows of the
outcomes other than applied: duplicate deliveries and dead letters (one statement each)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

import psycopg

from worker.outcome import Handled, Outcome
from worker.store.dead_letters import _dead_letter_text
from worker.store.ladders import LadderPolicy


@dataclass(frozen=True, slots=True)
class BatchMatch:
    """A validated match of a batch: canonical JSON ``payload``, its sha256 ``payload_hash``, its
    ladder's configured policy (``ladder_policy``), the Celery ``task_id`` of the message that carried it."""

    payload: dict[str, Any]
    payload_hash: str
    finished_at: datetime
    ladder_policy: LadderPolicy
    task_id: str | None
    raw_body: str | bytes | None = None
    """The message as received (kept verbatim if it turns out to be a conflicting duplicate)."""
    payload_json: str | None = None
    """``payload`` as JSON text (the canonical JSON), if the caller has it: stored in the ledger."""


@dataclass(frozen=True, slots=True)
class BatchDeadLetter:
    """A message of a batch that failed before the transaction (validation, or a permanent error of
    its own): it becomes a dead letter (``reason_code``, ``detail``, the raw body as text or bytes)
    in the batch's transaction."""

    reason_code: str
    detail: str
    raw_body: str | bytes
    match_id: str | None
    task_id: str | None


BatchEntry = BatchMatch | BatchDeadLetter


def conflict_detail(match_id: str, stored_hash: str, payload_hash: str) -> str:
    """The dead-letter detail of a ``conflicting_duplicate``: what happened and what to change."""
    return (f"match_id {match_id!r} was already applied with another payload (stored sha256 {stored_hash}, "
            f"this one {payload_hash}); a match id must never be reused for a different match")


class Dead(NamedTuple):
    """A dead letter the batch writes: the ``entry`` (its index in the batch), ``reason_code``,
    ``detail``, the raw body, the match id and task id when known."""

    entry: int
    reason_code: str
    detail: str
    raw_body: str | bytes
    match_id: str | None
    task_id: str | None


@dataclass(slots=True)
class Classified:
    """Step 1's verdicts (entry indices, queue order): matches ``to_apply``, ``duplicates``,
    ``dead`` letters, and the match ids applied before by the same task (``redelivered_applied``)."""

    to_apply: list[int] = field(default_factory=list)
    duplicates: list[int] = field(default_factory=list)
    dead: list[Dead] = field(default_factory=list)
    redelivered_applied: list[str] = field(default_factory=list)


def classify(entries: Sequence[BatchEntry], stored: dict[str, tuple[str, str | None]],
              results: list[Handled | None]) -> Classified:
    """Step 1 of :func:`apply_batch`: each entry in queue order against the ledger (``stored``) and
    the entries before it; a redelivery's result is set here, the others' after their writes."""
    out = Classified()
    seen_tasks: set[str] = set()
    in_batch: dict[str, tuple[str, str | None]] = {}
    for i, entry in enumerate(entries):
        task_id = entry.task_id
        if task_id is not None:
            if task_id in seen_tasks:  # the same message twice in one batch (requeued meanwhile)
                results[i] = Handled(Outcome.REDELIVERED, None, entry.match_id if isinstance(entry, BatchDeadLetter)
                                     else entry.payload["match_id"])
                continue
            seen_tasks.add(task_id)
        if isinstance(entry, BatchDeadLetter):
            out.dead.append(Dead(i, entry.reason_code, entry.detail, entry.raw_body, entry.match_id, task_id))
            continue
        match_id = entry.payload["match_id"]
        prior = in_batch.get(match_id) or stored.get(match_id)
        if prior is None:
            in_batch[match_id] = (entry.payload_hash, task_id)
            out.to_apply.append(i)
        elif task_id is not None and prior[1] == task_id:
            out.redelivered_applied.append(match_id)
            results[i] = Handled(Outcome.REDELIVERED, None, match_id, entry.payload["ladder"])
        elif prior[0] != entry.payload_hash:
            raw = entry.raw_body if entry.raw_body is not None else json.dumps(entry.payload, ensure_ascii=False)
            out.dead.append(Dead(i, "conflicting_duplicate", conflict_detail(match_id, prior[0], entry.payload_hash),
                                  raw, match_id, task_id))
        else:
            out.duplicates.append(i)
    return out


def record_duplicates(cur: psycopg.Cursor, entries: Sequence[BatchEntry], duplicates: list[int],
                       results: list[Handled | None]) -> None:
    """The duplicates' rows in ``duplicate_deliveries`` (one statement) and their results: a task
    id recorded before makes a redelivery."""
    if not duplicates:
        return
    matches = [entry for i in duplicates if isinstance(entry := entries[i], BatchMatch)]
    rows = cur.execute(
        """INSERT INTO duplicate_deliveries (match_id, task_id)
           SELECT m, t FROM unnest(%b::text[], %b::text[]) WITH ORDINALITY AS u(m, t, n) ORDER BY n
           ON CONFLICT (task_id) WHERE task_id IS NOT NULL DO NOTHING RETURNING task_id""",
        ([m.payload["match_id"] for m in matches], [m.task_id for m in matches]),
    ).fetchall()
    recorded = {t for (t,) in rows}
    for i, m in zip(duplicates, matches):
        outcome = Outcome.DUPLICATE if m.task_id is None or m.task_id in recorded else Outcome.REDELIVERED
        results[i] = Handled(outcome, None, m.payload["match_id"], m.payload["ladder"])


def record_dead_letters(cur: psycopg.Cursor, dead: list[Dead], results: list[Handled | None]) -> None:
    """The dead letters' rows (one statement, raw bodies kept) and their results: a task id
    recorded before makes a redelivery."""
    if not dead:
        return
    texts = [_dead_letter_text(d.raw_body) for d in dead]
    rows = cur.execute(
        """INSERT INTO dead_letters (reason_code, detail, match_id, raw_body, raw_encoding, task_id)
           SELECT r, d, m, b, e, t
             FROM unnest(%b::text[], %b::text[], %b::text[], %b::text[], %b::text[], %b::text[])
                  WITH ORDINALITY AS u(r, d, m, b, e, t, n) ORDER BY n
           ON CONFLICT (task_id) WHERE task_id IS NOT NULL DO NOTHING RETURNING task_id""",
        ([d.reason_code for d in dead], [d.detail.replace("\x00", "\\x00") for d in dead], [d.match_id for d in dead],
         [t for t, _ in texts], [e for _, e in texts], [d.task_id for d in dead]),
    ).fetchall()
    recorded = {t for (t,) in rows}
    for d in dead:
        results[d.entry] = (Handled(Outcome.DEAD_LETTER, d.reason_code, d.match_id)
                            if d.task_id is None or d.task_id in recorded
                            else Handled(Outcome.REDELIVERED, d.reason_code, d.match_id))
