"""Rebuild figures at scale: ``python bench/rebuild_scale.py --matches 100000 [--during 3000]``.

In a database of its own (on ``RATINGS_DATABASE_URL``, queue and stream on ``RATINGS_BROKER_URL``):
writes a ledger of ``--matches`` classic Elo matches (the bench's generator) and the players table
its replay gives, starts one worker process, then rebuilds the ``elo`` ladder with K = 20 while
``--during`` further matches are published one by one. Prints the rebuild's report, how many
matches the worker applied during it, and whether ``verify`` passes; removes the database.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.replay import replay  # noqa: E402
from worker import store as repository  # noqa: E402
from worker.devtools.bench import _LEDGER_SQL  # noqa: E402
from worker.devtools.runtime import ServiceProcesses, wait_until_drained  # noqa: E402
from worker.mapping import to_engine_match  # noqa: E402
from worker.ops.rebuild import rebuild_ladder  # noqa: E402
from worker.ops.verify import verify_ladder  # noqa: E402
from worker.policy.ladders import load_ladders  # noqa: E402
from worker.policy.stored import ladder_contents  # noqa: E402
from worker.producer import producer_app, publish_match  # noqa: E402
from worker.settings import DEFAULT_LADDERS_FILE  # noqa: E402
from worker.store.migrate import migrate  # noqa: E402
from worker.store.urls import url_with  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--matches", type=int, default=100_000)
    parser.add_argument("--players", type=int, default=10_000)
    parser.add_argument("--during", type=int, default=3000, help="matches published while the rebuild runs")
    args = parser.parse_args()
    admin, broker = os.environ["RATINGS_DATABASE_URL"], os.environ["RATINGS_BROKER_URL"]
    suffix = uuid.uuid4().hex[:8]
    dbname = f"ratings_rebuild_bench_{suffix}"
    url = url_with(admin, dbname=dbname)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{dbname}"')
    tmp = Path(tempfile.mkdtemp(prefix="rebuild-bench-"))
    procs = None
    try:
        migrate(url)
        policy = load_ladders(DEFAULT_LADDERS_FILE)["elo"]
        content = ladder_contents(DEFAULT_LADDERS_FILE)["elo"]
        k20 = tmp / "ladders.toml"
        k20.write_text(DEFAULT_LADDERS_FILE.read_text().replace("constant = 30", "constant = 20"))
        with psycopg.connect(url, autocommit=True) as conn:
            started = time.perf_counter()
            conn.execute(_LEDGER_SQL, {"players": args.players, "first": 1, "last": args.matches})
            conn.execute("VACUUM ANALYZE ledger")
            with conn.transaction():
                standings = replay((to_engine_match(p) for p in repository.iter_ledger(conn, "elo")), policy)
                with conn.cursor().copy("COPY players (ladder, player_id, rating, peak_rating, games_played, wins, "
                                        "draws, losses) FROM STDIN") as copy:
                    for pid, s in standings.items():
                        copy.write_row(("elo", pid, s.rating, s.peak_rating, s.games_played, s.wins, s.draws, s.losses))
                with conn.cursor() as cur:
                    repository.policy_in_force(cur, "elo", policy, content)
            print(f"ledger of {args.matches:,} matches written in {time.perf_counter() - started:.1f} s", flush=True)
        queue, stream = f"rebuild-bench-{suffix}", f"rebuild-bench-{suffix}.rating-changed"
        env = dict(os.environ, RATINGS_DATABASE_URL=url, RATINGS_QUEUE=queue, RATINGS_STREAM=stream)
        procs = ServiceProcesses(env, tmp / "logs")
        procs.start_worker("w1", concurrency=1)
        procs.start_relay()
        app = producer_app(broker)
        done = threading.Event()
        published = 0

        def publish():
            nonlocal published
            for n in range(args.during):
                a, b = n % args.players, (n * 7 + 1) % args.players
                if a == b:
                    b = (b + 1) % args.players
                publish_match(app, {"schema_version": 1, "match_id": f"during-{n}", "ladder": "elo",
                                    "finished_at": "2026-05-01T12:00:00Z",
                                    "side_a": {"players": [{"player_id": f"pl{a:06d}"}]},
                                    "side_b": {"players": [{"player_id": f"pl{b:06d}"}]},
                                    "outcome": "side_a_won"}, queue=queue)
                published += 1
                if done.is_set():
                    break
                time.sleep(0.002)

        with psycopg.connect(url, autocommit=True) as conn:
            before = conn.execute("SELECT count(*) FROM ledger").fetchone()[0]
        feeder = threading.Thread(target=publish)
        feeder.start()
        time.sleep(2.0)  # the worker is applying matches when the rebuild starts
        k20_policy = load_ladders(k20)["elo"]
        report = rebuild_ladder(url, "elo", k20_policy, ladder_contents(k20)["elo"], requested_by="bench")
        with psycopg.connect(url, autocommit=True) as conn:
            applied_by_end = conn.execute("SELECT count(*) FROM ledger").fetchone()[0] - before
        done.set()
        feeder.join()
        wait_until_drained(url, args.matches + published, timeout=600)
        with psycopg.connect(url, autocommit=True) as conn:
            result = verify_ladder(conn, "elo", policy)
        print(json.dumps({**report.as_dict(), "matches_applied_by_workers_until_rebuild_end": applied_by_end,
                          "published_during": published, "verify_ok": result.ok,
                          "verify_matches": result.matches}, indent=2))
        return 0 if result.ok else 1
    finally:
        if procs is not None:
            procs.stop_all()
            import redis

            client = redis.Redis.from_url(broker)
            client.delete(queue, stream, f"_kombu.binding.{queue}")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


if __name__ == "__main__":
    sys.exit(main())
