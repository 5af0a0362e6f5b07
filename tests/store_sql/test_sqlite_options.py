"""SQLite durability is a documented URL option: FULL by default, NORMAL on request."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratchet_api.errors import StoreError
from ratchet_store_sql import SqlJobStore

# PRAGMA synchronous answers with a number
LEVELS = {"OFF": 0, "NORMAL": 1, "FULL": 2, "EXTRA": 3}


def _synchronous(store: SqlJobStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.exec_driver_sql("PRAGMA synchronous").scalar() or 0)


def test_commits_are_durable_against_power_loss_by_default(tmp_path: Path) -> None:
    store = SqlJobStore(f"sqlite:///{tmp_path / 'a.db'}", create_schema=True)
    assert _synchronous(store) == LEVELS["FULL"]
    store.close()


@pytest.mark.parametrize("value", ["normal", "NORMAL", "extra", "full"])
def test_synchronous_url_option_is_applied_to_every_connection(tmp_path: Path, value: str) -> None:
    store = SqlJobStore(f"sqlite:///{tmp_path / 'b.db'}?synchronous={value}", create_schema=True)
    assert _synchronous(store) == LEVELS[value.upper()]
    assert "synchronous" not in store.engine.url.query  # not passed on to the driver
    store.close()


def test_an_unknown_synchronous_value_is_refused_naming_the_option(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"synchronous='sometimes'.*full, normal"):
        SqlJobStore(f"sqlite:///{tmp_path / 'c.db'}?synchronous=sometimes")
