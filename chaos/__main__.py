"""The reliability suite: `python -m chaos --size ci|full|load [--seed N] [--only trees]`.

Starts a real stack (dev server on SQLite, gateway, demo systems, workers), runs agent runs
while injecting faults, prints a table of fault classes and invariants, and exits 1 on any
violation (2 if the stack could not be started). See chaos/driver.py for the phases. `--only
trees` runs the agent trees' classes alone (chaos.trees), under class 1's kills and phase B's
server restarts.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from dataclasses import replace
from typing import Literal

from chaos.driver import Suite
from chaos.model import Check
from chaos.outsiders import mcp_schemas
from chaos.report import table
from chaos.sizes import SIZES
from chaos.stack import S3_BLOBS, Stack
from waitstate.blobs import BlobStore
from waitstate.settings import exit_process

DEFAULT_SEED = 20261129


async def _main(
    size: str, seed: int, keep: bool, blobs: Literal["dir", "s3"], only: str | None = None
) -> int:
    began = time.monotonic()
    # Waiting runs are evicted from the workers' cache under load, as in production.
    cache = 200 if size == "load" else 100
    chosen = SIZES[size]
    if only is not None:  # phase B then parks the chosen classes' runs alone
        chosen = replace(chosen, parked=0, cancels=0)
    async with Stack(
        keep=keep,
        max_cached_workflows=cache,
        mcp=chosen.mcp_server,
        mcp_delete_schemas=mcp_schemas(chosen),
        blobs=blobs,
    ) as stack:
        up = time.monotonic() - began
        where = f", blobs in {S3_BLOBS} at {stack.s3_url}" if blobs == "s3" else ""
        print(f"stack up in {up:.1f}s (state in {stack.dir}{where})", flush=True)
        suite = Suite(stack, chosen, seed)
        checks: list[Check] = await suite.run(load=size == "load", only=only)
        suite.figures["blobs stored"] = await _count(stack.blob_store())
    wall = time.monotonic() - began
    print()
    print(table(checks))
    print()
    for name, value in suite.figures.items():
        print(f"{name}: {value:.1f}")
    runs = len(suite.outcomes)
    failed = [c for c in checks if not c.ok]
    verdict = "FAILED" if failed else "passed"
    which = f" --only {only}" if only else ""
    print(f"chaos --size {size} --seed {seed}{which}: {runs} runs, {verdict}, wall {wall:.0f}s")
    return 1 if failed else 0


async def _count(store: BlobStore) -> int:
    """How many blobs the workers stored (proof that they used the store the suite chose)."""
    return len([ref async for ref, _ in store.refs()])


def main() -> int:
    """Parse arguments, run the suite, return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="ci")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED)
    parser.add_argument("--keep", action="store_true", help="keep the logs and SQLite file")
    parser.add_argument(
        "--blobs",
        choices=["dir", "s3"],
        default="dir",
        help="the workers' blob store: a directory, or a bucket of an S3 server (moto's)",
    )
    parser.add_argument(
        "--only", choices=["trees"], help="run these classes alone (with the worker kills)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    print(f"chaos --size {args.size} --seed {args.seed} --blobs {args.blobs}", flush=True)
    try:
        return asyncio.run(_main(args.size, args.seed, args.keep, args.blobs, args.only))
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    exit_process(main())
