"""Run ``ratchet`` with this process's Python clock shifted by an offset:
``python -m tests.crash.clockshift SECONDS ratchet-args...``.

time-machine moves ``time.time``, ``datetime.now`` and friends (ticking on from the shifted
instant); the SQLite library's own clock, read inside SQL statements, is not moved. A store
that took "now" from the application's clock would see this worker's time; one that reads the
database's clock does not.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta

import time_machine

if __name__ == "__main__":
    from ratchet_core.cli import main

    offset = timedelta(seconds=float(sys.argv[1]))
    sys.argv = ["ratchet", *sys.argv[2:]]
    with time_machine.travel(datetime.now(UTC) + offset, tick=True):
        code = main()
    sys.exit(code)
