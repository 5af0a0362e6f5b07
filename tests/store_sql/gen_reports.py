"""Regenerate the SQL store's compatibility reports (JSON + Markdown) in docs/compatibility/.

    .venv/bin/python -m tests.store_sql.gen_reports

Runs the whole TCK (tests/store_sql/test_tck_sql.py) against SQLite, PostgreSQL and MariaDB
with CI=true (an unavailable server fails instead of skipping) and writes
docs/compatibility/{sqlite,postgresql,mariadb}.{json,md}.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "compatibility"
NAME = "ratchet-store-sql"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                str(ROOT / "tests" / "store_sql" / "test_tck_sql.py"),
                "--ratchet-tck-report",
                tmp,
                "--ratchet-tck-name",
                NAME,
            ],
            cwd=ROOT,
            env={**os.environ, "CI": "true"},
            check=False,
        )
        OUT.mkdir(parents=True, exist_ok=True)
        for backend in ("sqlite", "postgresql", "mariadb"):
            for ext in ("json", "md"):
                source = Path(tmp) / f"{NAME}-{backend}.{ext}"
                if not source.exists():
                    print(f"missing report {source.name}", file=sys.stderr)
                    return 1
                shutil.copyfile(source, OUT / f"{backend}.{ext}")
                print(f"wrote {OUT / f'{backend}.{ext}'}")
    return result.returncode


if __name__ == "__main__":
    raise SystemExit(main())
