"""Store: the read API's queries (ladders in force, player states, leaderboard pages as of a moment,
a match's status). Read-only: nothing here writes.

The player history the API shows is :func:`worker.store.read_models.history` and
:func:`worker.store.read_models.history_corrections`, the same as ``ratings history``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

import psycopg
from psycopg.rows import class_row

from worker.store.connection import scalar
from worker.store.read_models import StoredState


class LadderInForce(NamedTuple):
    """A ladder's row of ``ladders`` with its policy: ``model`` (the policy content's ``model``,
    ``elo`` when it names none), ``policy_version``, the history ``generation``, the replay order,
    and the number of ``players``."""

    ladder: str
    policy_version: str
    model: str
    generation: int
    apply_order: str
    players: int


def ladders_in_force(conn: psycopg.Connection) -> list[LadderInForce]:
    """Every ladder with a recorded policy, by name."""
    return conn.cursor(row_factory=class_row(LadderInForce)).execute(
        """
        SELECT l.ladder, l.policy_version, coalesce(p.content->>'model', 'elo') AS model, l.generation,
               l.apply_order, (SELECT count(*) FROM players pl WHERE pl.ladder = l.ladder) AS players
          FROM ladders l JOIN policies p ON p.version = l.policy_version
         ORDER BY l.ladder COLLATE "C"
        """
    ).fetchall()


def ladder_generation(conn: psycopg.Connection, ladder: str) -> int | None:
    """The ladder's current history generation, ``None`` for a ladder with no recorded policy."""
    row = conn.execute("SELECT generation FROM ladders WHERE ladder = %s", (ladder,)).fetchone()
    return None if row is None else int(row[0])


@dataclass(frozen=True, slots=True)
class PlayerState:
    """One player's current state on a ladder: ``rating`` (rating points), ``rank`` (1 + the number
    of players rated higher: ties share a rank), games, wins, draws, losses, ``peak_rating``, and
    the last match in the ladder's current history (``last_match_id``, ``last_finished_at``; ``None``
    when every match of the player was annulled)."""

    player_id: str
    rating: float
    rank: int
    games: int
    wins: int
    draws: int
    losses: int
    peak_rating: float
    last_match_id: str | None
    last_finished_at: datetime | None


RANK_BY_WINDOW_FROM = 8
"""From this many ids on, :func:`player_states` ranks with one window over the ladder (one ordered
scan of its players); below, with one count over the rating index per id."""

_STATES = """
SELECT p.player_id, p.rating, {rank} AS rank,
       p.games_played AS games, p.wins, p.draws, p.losses, p.peak_rating,
       last.match_id AS last_match_id, last.finished_at AS last_finished_at
  FROM unnest(%(ids)s::text[]) WITH ORDINALITY AS asked(player_id, n)
  JOIN {players} p ON p.ladder = %(ladder)s AND p.player_id = asked.player_id
  LEFT JOIN LATERAL (
        SELECT rc.match_id, l.finished_at
          FROM rating_changes rc JOIN ledger l ON l.seq = rc.ledger_seq
         WHERE rc.ladder = p.ladder AND rc.player_id = p.player_id AND rc.superseded_by IS NULL
           AND rc.generation = coalesce((SELECT generation FROM ladders WHERE ladder = p.ladder), 0)
         ORDER BY rc.sequence DESC LIMIT 1) last ON true
 ORDER BY asked.n
"""
_STATES_COUNTED = _STATES.format(
    rank="1 + (SELECT count(*) FROM players q WHERE q.ladder = p.ladder AND q.rating > p.rating)", players="players")
_STATES_WINDOWED = _STATES.format(rank="p.rank", players="""(
        SELECT *, rank() OVER (ORDER BY rating DESC) AS rank FROM players WHERE ladder = %(ladder)s)""")


def player_states(conn: psycopg.Connection, ladder: str, player_ids: Sequence[str]) -> list[PlayerState]:
    """The states of those of ``player_ids`` that have a row on ``ladder`` (in the order asked; the
    others are left out). Ranks: one count of higher ratings per id (the ``players_ladder_rating``
    index), or from :data:`RANK_BY_WINDOW_FROM` ids on one ``rank()`` window over the ladder."""
    sql = _STATES_WINDOWED if len(player_ids) >= RANK_BY_WINDOW_FROM else _STATES_COUNTED
    return conn.cursor(row_factory=class_row(PlayerState)).execute(
        sql, {"ladder": ladder, "ids": list(player_ids)}).fetchall()


def leaderboard_moment(conn: psycopg.Connection) -> datetime:
    """The moment a new leaderboard reading is taken at: the database's ``now()``, or the start of
    the oldest transaction still open in this database when that is earlier. Every transaction that
    started before the moment has ended when this returns, so the statements that follow (on the
    same server) see all of it: a page read "as of" the moment later gives the same rows whatever
    commits meanwhile. Seeing other sessions' transactions takes the ``pg_read_all_stats`` role;
    without it the moment is ``now()`` and a rating transaction open at that instant may move a
    player across a page boundary."""
    return scalar(conn.execute(
        """SELECT least(now(), min(xact_start)) FROM pg_stat_activity
            WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
              AND backend_type = 'client backend'"""
    ))


class LeaderboardEntry(NamedTuple):
    """One row of a leaderboard page: ``player_id``, ``rating`` (rating points) and ``games`` as of
    the page's moment."""

    player_id: str
    rating: float
    games: int


_AS_OF = """
WITH changed AS (           -- players written at or after the moment: their state then comes from history
    SELECT player_id FROM players WHERE ladder = %(ladder)s AND updated_at >= %(at)s
), versions AS (            -- each history row with the time it was written (a correction's rows: the correction's)
    SELECT rc.player_id, rc.sequence, rc.rating_after, rc.deviation_after, rc.volatility_after,
           extract(epoch FROM l.finished_at)::float8 AS played_at, rc.superseded_by, sup.at AS superseded_at,
           coalesce(lag(sup.at) OVER w, l.applied_at) AS written_at
      FROM rating_changes rc
      JOIN changed USING (player_id)
      JOIN ledger l ON l.seq = rc.ledger_seq
      LEFT JOIN corrections sup ON sup.id = rc.superseded_by
     WHERE rc.ladder = %(ladder)s AND rc.generation = %(generation)s
    WINDOW w AS (PARTITION BY rc.match_id, rc.player_id ORDER BY rc.id)
), then_current AS (        -- the rows that were the player's history at the moment
    SELECT * FROM versions
     WHERE written_at < %(at)s AND (superseded_by IS NULL OR superseded_at >= %(at)s)
), recent AS (             -- each such player's last row then, and its number of rows then
    SELECT DISTINCT ON (player_id) player_id, rating_after AS rating,
           count(*) OVER (PARTITION BY player_id)::int AS games,
           deviation_after AS deviation, volatility_after AS volatility, played_at AS last_played
      FROM then_current ORDER BY player_id, sequence DESC
), as_of AS (
    SELECT p.player_id, p.rating, p.games_played AS games, p.deviation, p.volatility, p.last_played
      FROM players p WHERE p.ladder = %(ladder)s AND p.updated_at < %(at)s
    UNION ALL
    SELECT player_id, rating, games, deviation, volatility, last_played FROM recent
)
"""


def leaderboard_page(
    conn: psycopg.Connection, ladder: str, generation: int, at: datetime, limit: int,
    after: tuple[float, str] | None = None,
) -> list[LeaderboardEntry]:
    """Up to ``limit`` players of ``ladder`` by rating as of ``at`` (highest first, ties by
    ``player_id`` in code point order), after the ``(rating, player_id)`` key ``after`` (``None``:
    from the top).

    The state of a player last written before ``at`` is its row in ``players``; a player written
    since is read back from its history rows in ``generation`` as they stood at ``at`` (each row
    counts from its match's ``applied_at``, or for a row a correction wrote from that correction's
    time, until the correction that superseded it), so pages read at different times with the same
    ``at`` and ``generation`` form one ordering: no player repeated or left out. A player with no
    history at ``at`` (created since) is left out.
    """
    rows = conn.cursor(row_factory=class_row(LeaderboardEntry)).execute(
        _AS_OF + """
        SELECT player_id, rating, games FROM as_of
         WHERE %(after_rating)s::float8 IS NULL OR rating < %(after_rating)s
            OR (rating = %(after_rating)s AND player_id COLLATE "C" > %(after_player)s::text COLLATE "C")
         ORDER BY rating DESC, player_id COLLATE "C" LIMIT %(limit)s
        """,
        {"ladder": ladder, "generation": generation, "at": at, "limit": limit,
         "after_rating": after[0] if after else None, "after_player": after[1] if after else None},
    ).fetchall()
    return rows


def states_as_of(conn: psycopg.Connection, ladder: str, generation: int, at: datetime) -> dict[str, StoredState]:
    """Every player of ``ladder`` with its state as of ``at`` (as :func:`leaderboard_page` reads
    it: rating and deviation in rating points, games, volatility, and ``last_played`` in seconds
    since the epoch, for a player written since ``at`` its last match's ``finished_at`` then), for
    the leaderboard of a model with uncertainty, ranked on read (:func:`worker.store.standings.board`)."""
    rows = conn.execute(
        _AS_OF + "SELECT player_id, rating, games, deviation, volatility, last_played FROM as_of",
        {"ladder": ladder, "generation": generation, "at": at}).fetchall()
    return {pid: StoredState(*rest) for pid, *rest in rows}


class UncertaintyChange(NamedTuple):
    """The before and after of a history row's deviation (rating points) and volatility (Glicko-2),
    ``None`` under Elo."""

    deviation_before: float | None
    deviation_after: float | None
    volatility_before: float | None
    volatility_after: float | None


def history_uncertainty(conn: psycopg.Connection, ladder: str, player_id: str) -> dict[str, UncertaintyChange]:
    """Match id to the deviation and volatility before and after of the player's current history
    row of that match (the rows of :func:`worker.store.read_models.history`)."""
    rows = conn.execute(
        """SELECT match_id, deviation_before, deviation_after, volatility_before, volatility_after
             FROM rating_changes
            WHERE ladder = %(ladder)s AND player_id = %(player)s AND superseded_by IS NULL
              AND generation = coalesce((SELECT generation FROM ladders WHERE ladder = %(ladder)s), 0)""",
        {"ladder": ladder, "player": player_id}).fetchall()
    return {match_id: UncertaintyChange(*rest) for match_id, *rest in rows}


def search_players(conn: psycopg.Connection, ladder: str, prefix: str, limit: int = 50) -> list[str]:
    """Player ids of ``ladder`` starting with ``prefix`` (case-sensitive), in code point order."""
    pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    return [r[0] for r in conn.execute(
        """SELECT player_id FROM players WHERE ladder = %s AND player_id LIKE %s
            ORDER BY player_id COLLATE "C" LIMIT %s""", (ladder, pattern, limit))]


def history_rewrites(conn: psycopg.Connection, ladder: str, player_id: str) -> dict[str, int]:
    """Match id to the last correction that rewrote the player's row of that match (current generation):
    the rows of :func:`worker.store.read_models.history` a correction wrote."""
    return dict(conn.execute(
        """SELECT match_id, max(superseded_by) FROM rating_changes
            WHERE ladder = %(ladder)s AND player_id = %(player)s AND superseded_by IS NOT NULL
              AND generation = coalesce((SELECT generation FROM ladders WHERE ladder = %(ladder)s), 0)
            GROUP BY match_id""",
        {"ladder": ladder, "player": player_id}).fetchall())


class LedgerEntry(NamedTuple):
    """A match's ledger row as the API shows it."""

    match_id: str
    ladder: str
    finished_at: datetime
    applied_at: datetime
    annulled: bool
    placed_at_end: bool
    policy_version: str | None
    redeliveries: int


class MatchChange(NamedTuple):
    """One player's rating change by a match (current history): ratings in rating points, scores in
    [0, 1]."""

    player_id: str
    result: str
    rating_before: float
    rating_after: float
    expected_score: float
    actual_score: float
    k_factor: float


class Annulment(NamedTuple):
    """An annulment on record: why, by whom, when."""

    reason: str
    annulled_by: str
    annulled_at: datetime


class MatchDeadLetter(NamedTuple):
    """A dead letter of a match: its id, reason code, detail, status and when it was received."""

    id: int
    reason_code: str
    detail: str
    status: str
    received_at: datetime


@dataclass(frozen=True, slots=True)
class MatchRecord:
    """Everything on record about one ``match_id``: its ledger row (``None``: never applied), its
    current rating changes, its annulment, the times of its duplicate deliveries and its dead letters."""

    ledger: LedgerEntry | None
    changes: list[MatchChange]
    annulment: Annulment | None
    duplicates: list[datetime]
    dead_letters: list[MatchDeadLetter]


def match_record(conn: psycopg.Connection, match_id: str) -> MatchRecord:
    """What is on record about ``match_id`` (see :class:`MatchRecord`)."""
    ledger = conn.cursor(row_factory=class_row(LedgerEntry)).execute(
        """SELECT match_id, ladder, finished_at, applied_at, annulled, placed_at_end, policy_version, redeliveries
             FROM ledger WHERE match_id = %s""", (match_id,)).fetchone()
    changes: list[MatchChange] = []
    annulment = None
    if ledger is not None:
        changes = conn.cursor(row_factory=class_row(MatchChange)).execute(
            """SELECT player_id, result, rating_before, rating_after, expected_score, actual_score, k_factor
                 FROM rating_changes
                WHERE match_id = %(m)s AND ladder = %(ladder)s AND superseded_by IS NULL
                  AND generation = coalesce((SELECT generation FROM ladders WHERE ladder = %(ladder)s), 0)
                ORDER BY player_id COLLATE "C" """, {"m": match_id, "ladder": ledger.ladder}).fetchall()
        annulment = conn.cursor(row_factory=class_row(Annulment)).execute(
            "SELECT reason, annulled_by, annulled_at FROM annulments WHERE match_id = %s", (match_id,)).fetchone()
    duplicates = [r[0] for r in conn.execute(
        "SELECT received_at FROM duplicate_deliveries WHERE match_id = %s ORDER BY id", (match_id,))]
    dead = conn.cursor(row_factory=class_row(MatchDeadLetter)).execute(
        """SELECT id, reason_code, detail, status, received_at FROM dead_letters WHERE match_id = %s
            ORDER BY id""", (match_id,)).fetchall()
    return MatchRecord(ledger, changes, annulment, duplicates, dead)


def read_only_probe(conn: psycopg.Connection) -> None:
    """``SELECT 1`` (the API's health check). Raises the driver's error when the database does not answer."""
    conn.execute("SELECT 1").fetchone()

