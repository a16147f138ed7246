"""``ratings policy show|diff`` and ``ratings check-published`` (registered by :mod:`worker.cli.main`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from worker.cli.common import ExitCode
from worker.settings import get_settings

policy_app = typer.Typer(help="Rating policies: what is active, its version, what changed.", no_args_is_help=True,
                         rich_markup_mode="markdown")
console = Console()
err = Console(stderr=True)


def ladder_policies_or_exit():
    """The ladders file's policies (:func:`worker.bootstrap.ladder_files`); on a broken file, print
    the error (file, line, key) and exit 3 (not ready)."""
    from worker.cli.common import ladder_files

    return ladder_files()


def _ladder_shapes_or_exit():
    """The match shapes each ladder of the ladders file rates (:mod:`worker.policy.shapes`); on a
    broken declaration, print the error (file, line, key) and exit 3 (not ready: the ladders file is
    the environment's)."""
    from worker.policy.ladders import LadderConfigError
    from worker.policy.shapes import load_ladder_shapes

    try:
        return load_ladder_shapes(get_settings().ladders_file)
    except LadderConfigError as exc:
        err.print(f"ladders file error: {exc}", markup=False)
        raise typer.Exit(ExitCode.NOT_READY) from exc


def _without_nulls(content: Any) -> Any:
    if isinstance(content, dict):
        return {k: _without_nulls(v) for k, v in content.items() if v is not None}
    return content


def _database_view(ladder: str) -> tuple[str | None, list[tuple[str | None, int]]] | None:
    """``(version in force, [(policy_version, matches), ...])`` for ``ladder`` from the database,
    or ``None`` without a reachable, migrated database."""
    url = get_settings().database_url
    if not url:
        return None
    from worker import bootstrap
    from worker.store.connection import DatabaseError
    from worker.store.policy_records import ledger_matches_by_policy_version, policy_version_in_force

    try:
        with bootstrap.open_database(get_settings(), connect_timeout=3) as conn:
            return policy_version_in_force(conn, ladder), ledger_matches_by_policy_version(conn, ladder)
    except DatabaseError:
        return None


@policy_app.command("show")
def show(
    ladder: Annotated[Optional[str], typer.Option(help="Only this ladder (default: every configured ladder).")] = None,
    file: Annotated[Optional[Path], typer.Option(help="Show a policy file instead of the configured ladders.")] = None,
) -> None:
    """Print each ladder's policy in the ladders file: its version (content hash), source file, the
    match shapes the ladder rates and every setting with defaults filled in (TOML). With a database configured, also the version in
    force (the one workers rate under; `ratings rebuild` switches it) and matches per version."""
    import tomli_w

    from worker.policy.config import PolicyConfigError, load_policy

    if file is not None:
        try:
            loaded = {file.stem: load_policy(file)}
        except PolicyConfigError as exc:
            err.print(f"policy error: {exc}", markup=False)
            raise typer.Exit(ExitCode.USAGE) from exc
        shapes = {}
    else:
        loaded = ladder_policies_or_exit()
        shapes = _ladder_shapes_or_exit()
        if ladder is not None:
            if ladder not in loaded:
                err.print(f"unknown ladder {ladder!r}; configured: {', '.join(sorted(loaded))}")
                raise typer.Exit(ExitCode.USAGE)
            loaded = {ladder: loaded[ladder]}
    for name, item in loaded.items():
        console.print(f"[bold]{name}[/bold]  version [cyan]{item.version}[/cyan]  from {item.source}")
        if item.config.description:
            console.print(f"  {item.config.description}")
        if name in shapes:
            console.print(f"  rates {shapes[name].describe()} (match_shapes: the ladder's, not part of the version)",
                          markup=False, highlight=False)
        console.print(tomli_w.dumps(_without_nulls(item.config.canonical())), markup=False, highlight=False)
        if file is None:
            view = _database_view(name)
            if view is None:
                continue
            in_force, versions = view
            if in_force is None:
                console.print("in force: none recorded yet (the first match rated records this file's policy)")
            elif in_force == item.version:
                console.print(f"in force: [cyan]{in_force}[/cyan] (this file's policy)")
            else:
                console.print(
                    f"[yellow]in force: {in_force}[/yellow], not this file's {item.version}: workers keep rating "
                    f"under {in_force} until `ratings rebuild --ladder {name}` switches to the file's policy "
                    f"(`ratings policy diff version:{in_force} ladder:{name}` shows what would change)"
                )
            if versions:
                table = Table("policy version", "matches in the ledger", title=f"{name}: ledger by policy version")
                for version, count in versions:
                    table.add_row(version or "(before versions)", f"{count:,}")
                console.print(table)


def _resolve(spec: str):
    """A policy file path, ``ladder:NAME`` for a configured ladder's active policy, or
    ``version:HASH`` for a policy recorded in the database (``policies`` table)."""
    from worker.policy.config import LoadedPolicy, PolicyConfigError, config_of, load_policy

    if spec.startswith("version:"):
        from worker import bootstrap
        from worker.store.policy_records import policy_content

        version = spec.removeprefix("version:")
        url = get_settings().database_url
        if not url:
            err.print("version:HASH needs RATINGS_DATABASE_URL")
            raise typer.Exit(ExitCode.NOT_READY)
        with bootstrap.open_database(get_settings(), connect_timeout=10) as conn:
            content = policy_content(conn, version)
        if content is None:
            err.print(f"no policy with version {version!r} in the policies table")
            raise typer.Exit(ExitCode.USAGE)
        config = config_of(content)
        return LoadedPolicy(config.build(), config, Path(spec))

    if spec.startswith("ladder:"):
        name = spec.removeprefix("ladder:")
        loaded = ladder_policies_or_exit()
        if name not in loaded:
            err.print(f"unknown ladder {name!r}; configured: {', '.join(sorted(loaded))}")
            raise typer.Exit(ExitCode.USAGE)
        return loaded[name]
    try:
        return load_policy(Path(spec))
    except PolicyConfigError as exc:
        err.print(f"policy error: {exc}", markup=False)
        raise typer.Exit(ExitCode.USAGE) from exc


@policy_app.command("diff")
def diff_command(
    old: Annotated[str, typer.Argument(help="A policy file, or ladder:NAME for a ladder's active policy.")],
    new: Annotated[str, typer.Argument(help="A policy file, or ladder:NAME.")],
    exit_code: Annotated[bool, typer.Option("--exit-code", help="Exit 1 when the policies differ (as git diff).")] = False,
) -> None:
    """What changed between two policies: every setting that differs, old and new values."""
    from worker.policy.config import diff

    a, b = _resolve(old), _resolve(new)
    changes = diff(a.config.canonical(), b.config.canonical())
    console.print(f"{old} [cyan]{a.version}[/cyan] -> {new} [cyan]{b.version}[/cyan]")
    if not changes:
        console.print("no differences: the two policies rate every match the same way")
        return
    table = Table("setting", "old", "new")
    for key, before, after in changes:
        table.add_row(key, "-" if before is None else repr(before), "-" if after is None else repr(after))
    console.print(table)
    if exit_code:
        raise typer.Exit(ExitCode.FINDINGS)


def check_published_command(
    policy: Annotated[Path, typer.Argument(help="Policy file, e.g. examples/fivethirtyeight-nfl.toml.")],
    games: Annotated[Path, typer.Argument(help="Published table, e.g. tests/data/nfl-elo/nfl_games.csv.")],
    rating_tolerance: Annotated[float, typer.Option(help="Largest accepted rating difference (rating points).")] = 0.01,
    prob_tolerance: Annotated[float, typer.Option(help="Largest accepted win-probability difference.")] = 1e-4,
) -> None:
    """Replay a published rating table (FiveThirtyEight's nfl_games.csv layout) under a policy and
    compare every pre-game rating and win probability; exit 1 when any row is off."""
    from engine import RatingPolicy
    from worker.ops.published import check_published
    from worker.policy.config import PolicyConfigError, load_policy

    try:
        loaded = load_policy(policy)
    except PolicyConfigError as exc:
        err.print(f"policy error: {exc}", markup=False)
        raise typer.Exit(ExitCode.USAGE) from exc
    if not isinstance(loaded.policy, RatingPolicy):
        err.print(f"{policy}: published Elo figures are checked against an Elo policy; this one is "
                  f"model {loaded.policy.model!r}", markup=False)
        raise typer.Exit(ExitCode.USAGE)
    try:
        result = check_published(games, loaded.policy, rating_tolerance, prob_tolerance)
    except (OSError, ValueError) as exc:
        err.print(f"cannot read {games}: {exc}", markup=False)
        raise typer.Exit(ExitCode.USAGE) from exc
    console.print(f"policy {policy} (version {loaded.version}), {result.games:,} games replayed")
    console.print(
        f"largest rating difference {result.max_rating_diff:.6f} ({result.worst_rating}); "
        f"rows over {rating_tolerance}: {result.over_rating_tolerance}"
    )
    console.print(
        f"largest probability difference {result.max_prob_diff:.3g} ({result.worst_prob}); "
        f"rows over {prob_tolerance:g}: {result.over_prob_tolerance}"
    )
    for line in result.first_failures:
        console.print(f"  {line}", markup=False)
    if not result.ok():
        raise typer.Exit(ExitCode.FINDINGS)
    console.print("[green]OK[/green]: every published figure reproduced within the tolerances")
