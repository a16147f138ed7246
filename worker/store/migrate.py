"""Schema migrations, applied with yoyo-migrations from the SQL files in ``worker/store/migrations``."""

from __future__ import annotations

from pathlib import Path

from yoyo import get_backend, read_migrations

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def _yoyo_url(database_url: str) -> str:
    """The same URL with yoyo's driver prefix for psycopg 3 (``postgresql+psycopg://``)."""
    scheme, sep, rest = database_url.partition("://")
    if not sep or scheme not in ("postgres", "postgresql"):
        raise ValueError("RATINGS_DATABASE_URL must start with postgresql:// (or postgres://)")
    return f"postgresql+psycopg://{rest}"


def migrate(database_url: str) -> list[str]:
    """Apply every pending migration under yoyo's lock; return the ids applied (maybe none)."""
    backend = get_backend(_yoyo_url(database_url))
    migrations = read_migrations(str(MIGRATIONS_DIR))
    with backend.lock():
        pending = backend.to_apply(migrations)
        backend.apply_migrations(pending)
    return [m.id for m in pending]
