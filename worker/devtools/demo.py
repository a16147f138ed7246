"""``ratings demo``: the whole path on real data, with embedded servers when no URL is set."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import time

import redis
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from worker import store as repository
from worker.devtools.embedded import EmbeddedServers
from worker.devtools.runtime import ServiceProcesses, wait_until_drained
from worker.ops.football import football_matches
from worker.ops.generate import generate_sedma_matches
from worker.ops.render import leaderboard_table
from worker.ops.verify import verify_ladder
from worker.policy.ladders import load_ladders
from worker.producer import producer_app, publish_match
from worker.redis_url import redis_client, stream_entries
from worker.settings import get_settings
from worker.store.connection import connect
from worker.store.migrate import migrate
from worker.store.read_models import ledger_matches_with_prefix

console = Console()


def run_demo(football_limit: int | None = None, sedma_matches: int = 3000, workers: int = 2) -> int:
    """Migrate, start the relay and ``workers`` worker processes, publish the football matches and
    ``sedma_matches`` generated Sedma matches, wait until all are applied, print leaderboards,
    counts and ``verify``; stop everything. Returns the exit code (0 when verify passes and
    nothing is missing)."""
    settings = get_settings()
    started = time.monotonic()
    embedded = None
    # The event stream's Redis: the broker when that is Redis; on RabbitMQ RATINGS_EVENTS_REDIS_URL,
    # else an embedded Redis for the events only.
    database_url, broker_url, events_url = settings.database_url, settings.broker_url, settings.events_url
    if not database_url or not broker_url or not events_url:
        state = settings.state_dir.resolve() / "demo"
        shutil.rmtree(state, ignore_errors=True)  # a fresh embedded state for every demo run
        console.print(f"starting embedded servers under {state}")
        embedded = EmbeddedServers.start(
            state, postgres=not database_url, redis_server=not events_url
        )
        database_url = database_url or embedded.database_url
        broker_url = broker_url or embedded.broker_url
        events_url = events_url or embedded.broker_url
    env = dict(os.environ, RATINGS_DATABASE_URL=database_url, RATINGS_BROKER_URL=broker_url,
               RATINGS_EVENTS_REDIS_URL=events_url)
    if settings.broker_is_rabbitmq:
        console.print("broker: RabbitMQ (quorum queue, publisher confirms); events: Redis Stream")
    procs = ServiceProcesses(env, settings.state_dir.resolve() / "logs")
    try:
        applied = migrate(database_url)
        console.print(f"migrations applied: {', '.join(applied) or 'none pending'}")
        with connect(database_url, autocommit=True) as conn:
            already = ledger_matches_with_prefix(conn, "football:")
        if already:
            console.print(
                f"[red]this database already holds {already:,} football matches[/red]: the demo would only "
                "count duplicates. Point RATINGS_DATABASE_URL at an empty database, or unset both URLs "
                "to run on fresh embedded servers."
            )
            return 3  # the CLI's "environment not ready": this database is not one the demo can use
        for i in range(workers):
            procs.start_worker(f"worker{i + 1}", concurrency=1)
        procs.start_relay()
        client = redis_client(events_url)
        with connect(database_url, autocommit=True) as conn:
            before = repository.counts(conn)
        stream_before = client.xlen(settings.stream)
        last_id_before = _last_entry_id(client, settings.stream)

        football = list(football_matches(limit=football_limit))
        sedma = list(generate_sedma_matches(sedma_matches, players=300, seed=2026))
        total = len(football) + len(sedma)
        papp = producer_app(broker_url, ca_file=settings.broker_ca_file)
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console) as progress:
            pub = progress.add_task("published", total=total)
            done = progress.add_task("applied / duplicate / dead", total=total)
            with papp.producer_or_acquire() as producer:
                for n, match in enumerate(itertools.chain(football, sedma), 1):
                    publish_match(papp, match, queue=settings.queue, producer=producer)
                    if n % 500 == 0 or n == total:
                        progress.update(pub, completed=n)
            counts = wait_until_drained(
                database_url,
                before.received + total,
                timeout=3600,
                on_progress=lambda c: progress.update(done, completed=c.received - before.received),
            )
        # Give the relay its last round, then count the stream.
        events_expected = counts.events - before.events
        deadline = time.monotonic() + 30
        while client.xlen(settings.stream) - stream_before < events_expected and time.monotonic() < deadline:
            time.sleep(0.2)
        stream_events = client.xlen(settings.stream) - stream_before
        by_ladder = _stream_events_by_ladder(client, settings.stream, last_id_before)

        policies = load_ladders(settings.ladders_file)
        with connect(database_url, autocommit=True) as conn:
            for ladder in ("elo", "sedma"):
                console.print(leaderboard_table(f"{ladder} (top 10)", repository.leaderboard(conn, ladder, 10)))
            results = [verify_ladder(conn, ladder, policies[ladder]) for ladder in ("elo", "sedma")]
            dead_by_reason = repository.dead_letter_counts(conn)

        summary = Table(title="demo summary")
        summary.add_column("what")
        summary.add_column("count", justify="right")
        rows = [
            ("published (football)", len(football)),
            ("published (sedma)", len(sedma)),
            ("published (total)", total),
            ("applied", counts.applied - before.applied),
            ("duplicates", counts.duplicates - before.duplicates),
            ("dead letters", counts.dead_letters - before.dead_letters),
            ("events in the outbox", counts.events - before.events),
            ("events on the stream", stream_events),
            *((f"  of ladder {ladder}", n) for ladder, n in sorted(by_ladder.items()) if " " not in ladder),
            *((f"  {kind}", n) for kind, n in sorted(by_ladder.items()) if " " in kind),
        ]
        for what, n in rows:
            summary.add_row(what, f"{n:,}")
        console.print(summary)
        if dead_by_reason:
            console.print(f"dead letters by reason: {dead_by_reason}")
        ok = True
        for r in results:
            console.print(
                f"verify {r.ladder}: {r.matches:,} matches replayed, {r.players:,} players: "
                + ("[green]OK[/green]" if r.ok else f"[red]{len(r.differences)} difference(s)[/red]")
            )
            ok &= r.ok
        received = counts.received - before.received
        ok &= received == total and stream_events >= events_expected
        ok &= by_ladder.get("elo", 0) == 2 * len(football)
        _save_metrics(procs, settings.state_dir.resolve() / "logs")
        console.print(f"finished in {time.monotonic() - started:.1f} s: "
                      + ("[green]all good[/green]" if ok else "[red]FAILED[/red]"))
        return 0 if ok else 1
    finally:
        procs.stop_all()
        if embedded is not None:
            embedded.stop()


def _last_entry_id(client: redis.Redis, stream: str) -> str:
    """Id of the stream's newest entry ("0-0" when there is none)."""
    newest = stream_entries(client.xrevrange(stream, count=1))
    return newest[0][0] if newest else "0-0"


def _stream_events_by_ladder(client: redis.Redis, stream: str, after_id: str) -> dict[str, int]:
    """Count the stream's entries newer than ``after_id`` by ladder (``match`` events), and the
    other events by reason (``"correction events"``, ``"rebuild events"``) (read in pages of 10,000)."""
    counts: dict[str, int] = {}
    start = f"({after_id}"
    while True:
        page = stream_entries(client.xrange(stream, min=start, count=10_000))
        if not page:
            return counts
        for _, fields in page:
            event = json.loads(fields[b"payload"])
            key = event["ladder"] if event.get("reason", "match") == "match" else event["reason"] + " events"
            counts[key] = counts.get(key, 0) + 1
        start = "(" + page[-1][0]


def _save_metrics(procs: ServiceProcesses, folder) -> None:
    """Scrape every process's /metrics before stopping them; save each and print the key series."""
    import urllib.request

    keys = ("ratings_messages_total", "ratings_dead_letters_total", "ratings_events_published_total",
            "ratings_outbox_lag_seconds", "ratings_stream_length", "ratings_rating_pool_drift",
            "ratings_message_latency_seconds_count", "ratings_message_latency_seconds_sum",
            "ratings_out_of_order_total")
    for name, port in sorted(procs.ports.items()):
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError as exc:
            console.print(f"metrics of {name}: not reachable ({exc})")
            continue
        (folder / f"metrics-{name}.prom").write_text(text)
        lines = [line for line in text.splitlines() if line.startswith(keys)]
        console.print(f"[bold]metrics of {name}[/bold] (saved to {folder / f'metrics-{name}.prom'}):")
        for line in lines:
            console.print("  " + line, highlight=False)
