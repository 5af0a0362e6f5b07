"""``ratchet-tck``: certify a store and write its compatibility report.

    ratchet-tck report --fixture mypkg.tck:make_fixture --out build/tck --name "My store"
    ratchet-tck report --fixture mypkg.tck:make_fixture --out build/tck --spi 1.0

exits 0 when the verdict is "Ratchet Store Compatible", 1 when it is not, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from ratchet_api.errors import StoreSpiVersionError
from ratchet_tck.loader import FixtureSpecError, resolve
from ratchet_tck.report import VERDICT_COMPATIBLE
from ratchet_tck.versions import target_version


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ratchet-tck", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser("report", help="run every contract and write the report")
    report.add_argument(
        "--fixture",
        required=True,
        help="pkg.module:factory, a zero-argument callable returning a "
        "StoreFixture or a context manager yielding one",
    )
    report.add_argument("--out", required=True, help="directory for the JSON and Markdown")
    report.add_argument("--name", default=None, help="store name (default: the factory path)")
    report.add_argument(
        "--spi",
        default=None,
        metavar="VERSION",
        help="certify for this store SPI version (e.g. 1.0; default: the version the store "
        "declares with ratchet_store_spi, 1.0 when it declares none)",
    )
    report.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)

    # like ``python -m``: modules of the current directory are importable
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        resolve(args.fixture)
    except FixtureSpecError as exc:
        print(f"ratchet-tck: {exc}", file=sys.stderr)
        return 2
    if args.spi is not None:
        try:
            target_version(args.spi, None)
        except (ValueError, StoreSpiVersionError) as exc:
            print(f"ratchet-tck: --spi {args.spi!r}: {exc}", file=sys.stderr)
            return 2
    from ratchet_tck.runner import run_contracts

    code, data = run_contracts(
        args.fixture,
        args.out,
        args.name or args.fixture,
        extra_args=args.pytest_args,
        spi=args.spi,
    )
    if not data:
        print(f"ratchet-tck: pytest exited with {code} before writing a report", file=sys.stderr)
        return 2
    spi = data.get("spi")
    certified = f" for store SPI {spi['certified_for']}" if isinstance(spi, dict) else ""
    print(f"{data['name']}: {data['verdict']}{certified}  (report in {args.out})")
    return 0 if data.get("verdict") == VERDICT_COMPATIBLE else 1


if __name__ == "__main__":
    raise SystemExit(main())
