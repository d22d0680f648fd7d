"""The temporary Prefect API server of one run, as its own process: ``python -m tasks.prefect_server ...``.

Started by ``tasks.prefect_api`` (never by hand). It differs from Prefect's own temporary server
(``SubprocessASGIServer``: a random port probed free, a 20 s start-up allowance, the database in ``~/.prefect``
migrated by whichever run comes first) in four ways:

- It serves on a socket the run bound (port 0, passed as ``--fd``): no port is guessed, none can be taken.
- Its database is the run's own copy of a migrated template (``<home>/template-<prefect version>.db``, block types
  registered), so it starts without migrating. The first run of a home builds the template under an exclusive
  ``flock``: a second first run waits for it and then copies it; two runs never migrate one database.
- It dies with the run (``tasks.lifeline``: ``PR_SET_PDEATHSIG`` and a watchdog), ``kill -9`` included.
- Its output goes to ``<run folder>/server.log``, never to the run's stderr.
"""
from __future__ import annotations

import argparse
import asyncio
import fcntl
import os
import shutil
import socket
import sqlite3
from pathlib import Path

from tasks.lifeline import bind_to_parent

# What Prefect's SubprocessASGIServer sets for its server (no UI; ephemeral services only), plus: no migration and
# no block registration at start (the template has both), no telemetry (fails without a network).
SERVER_ENV = {"PREFECT_UI_ENABLED": "0", "PREFECT__SERVER_EPHEMERAL": "1", "PREFECT__SERVER_FINAL": "1",
              "PREFECT_API_DATABASE_MIGRATE_ON_START": "false", "PREFECT_API_BLOCKS_REGISTER_ON_START": "false",
              "PREFECT_SERVER_ANALYTICS_ENABLED": "false", "PREFECT_SERVER_LOGGING_LEVEL": "WARNING"}


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


def prepare_database(db: Path, template: Path) -> None:
    """Copy the migrated ``template`` to ``db``, building the template first if this home has none (under an
    exclusive lock: concurrent first runs build it once)."""
    if not template.is_file():
        with open(template.with_suffix(".lock"), "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            if not template.is_file():
                asyncio.run(_migrate())  # into ``db``, which the settings name
                tmp = template.with_name(f".tmp-{template.name}.{os.getpid()}")
                with sqlite3.connect(db) as src, sqlite3.connect(tmp) as dst:
                    src.backup(dst)  # consistent whatever is still in the write-ahead log
                os.replace(tmp, template)
                return
    shutil.copyfile(template, db)


async def _migrate() -> None:
    """Create the schema and register the block types: what Prefect's server does at start when told to."""
    from prefect.server.database import provide_database_interface
    from prefect.server.models.block_registration import run_block_auto_registration

    db = provide_database_interface()
    await db.create_db()
    session = await db.session()
    async with session:
        await run_block_auto_registration(session=session)
    await (await db.engine()).dispose()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m tasks.prefect_server")
    p.add_argument("--fd", type=int, required=True, help="listening socket bound by the run")
    p.add_argument("--db", type=Path, required=True, help="this run's database file")
    p.add_argument("--template", type=Path, required=True, help="the home's migrated template database")
    p.add_argument("--parent", type=int, required=True, help="the run's pid: this server dies with it")
    args = p.parse_args(argv)
    bind_to_parent(args.parent)
    os.environ.update({**SERVER_ENV, "PREFECT_API_DATABASE_CONNECTION_URL": sqlite_url(args.db)})
    prepare_database(args.db, args.template)

    import uvicorn
    from prefect.server.api.server import create_app

    sock = socket.socket(fileno=args.fd)
    config = uvicorn.Config(create_app, factory=True, log_level="error", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
