"""Regenerate every store's compatibility report (JSON + Markdown) in docs/compatibility/.

    .venv/bin/python -m tests.gen_compatibility_reports

Runs the whole TCK against the SQL store on SQLite, PostgreSQL and MariaDB
(tests/store_sql/test_tck_sql.py) and against the Mongo store on the Mongo test server
(tests/store_mongo/test_tck_mongo.py), with CI=true (a server that does not answer fails instead
of skipping), through the TCK's ``--ratchet-tck-report`` option, and writes
docs/compatibility/{sqlite,postgresql,mariadb,mongodb}.{json,md}. Exits non-zero when a run
failed, a report is missing, or a report's verdict is not "Ratchet Store Compatible". `.ci/run`
calls it after the test suite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ratchet_tck.report import VERDICT_COMPATIBLE

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "compatibility"

# (test module, report name given to the TCK, {report file stem: published name})
RUNS = [
    (
        "tests/store_sql/test_tck_sql.py",
        "ratchet-store-sql",
        {
            "ratchet-store-sql-sqlite": "sqlite",
            "ratchet-store-sql-postgresql": "postgresql",
            "ratchet-store-sql-mariadb": "mariadb",
        },
    ),
    (
        "tests/store_mongo/test_tck_mongo.py",
        "ratchet-store-mongo",
        {"ratchet-store-mongo": "mongodb"},
    ),
]


def main() -> int:
    status = 0
    OUT.mkdir(parents=True, exist_ok=True)
    for module, name, published in RUNS:
        with tempfile.TemporaryDirectory() as tmp:
            run = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:randomly",
                    str(ROOT / module),
                    "--ratchet-tck-report",
                    tmp,
                    "--ratchet-tck-name",
                    name,
                ],
                cwd=ROOT,
                env={**os.environ, "CI": "true"},
                check=False,
            )
            if run.returncode != 0:
                print(f"{module}: the TCK run failed (exit {run.returncode})", file=sys.stderr)
                status = 1
            for stem, target in published.items():
                source = Path(tmp) / f"{stem}.json"
                if not source.exists():
                    print(f"{module}: no report {source.name}", file=sys.stderr)
                    status = 1
                    continue
                verdict = json.loads(source.read_text(encoding="utf-8")).get("verdict")
                for ext in ("json", "md"):
                    shutil.copyfile(Path(tmp) / f"{stem}.{ext}", OUT / f"{target}.{ext}")
                print(f"docs/compatibility/{target}: {verdict}")
                if verdict != VERDICT_COMPATIBLE:
                    status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
