"""FastAPI: the lifespan helper, the scheduler dependency, and async endpoints that enqueue
without blocking the event loop."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import anyio
import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from ratchet_api.store.protocols import SchemaManager
from ratchet_core.contrib.fastapi import Scheduler
from ratchet_core.runtime.container import RatchetContainer
from ratchet_core.runtime.stores import open_store
from tests.integrations.fastapi_app import create_app


@pytest.fixture
def store_file(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    store = open_store(url)
    manager = store.capability(SchemaManager)
    assert manager is not None
    manager.upgrade()
    store.close()
    return url


def test_async_endpoint_enqueues_and_in_process_worker_runs_it(store_file: str) -> None:
    with TestClient(create_app(store_file, run_worker=True)) as client:
        response = client.post("/slugs", params={"title": "Hello Async World"})
        assert response.status_code == 202
        job_id = response.json()["job_id"]
        deadline = time.monotonic() + 10
        shown = client.get(f"/slugs/{job_id}").json()
        while shown["status"] != "SUCCEEDED" and time.monotonic() < deadline:
            time.sleep(0.05)
            shown = client.get(f"/slugs/{job_id}").json()
    assert shown == {"status": "SUCCEEDED", "value": "hello-async-world"}


def test_scheduler_dependency_without_lifespan_is_a_clear_error(store_file: str) -> None:
    app = FastAPI()

    @app.get("/")
    async def index(scheduler: Scheduler) -> str:
        return "unreachable"

    with pytest.raises(LookupError, match="ratchet_lifespan"):
        TestClient(app).get("/")


@pytest.mark.anyio
async def test_enqueue_waiting_for_the_database_does_not_block_the_event_loop(
    store_file: str,
) -> None:
    app = create_app(store_file)
    database = store_file.removeprefix("sqlite:///")
    locked = threading.Event()
    release = threading.Event()

    def hold_write_lock() -> None:
        # Another writer holds SQLite's write lock: the enqueue's INSERT must wait for it.
        conn = sqlite3.connect(database, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        locked.set()
        release.wait(10)
        conn.execute("ROLLBACK")
        conn.close()

    ticks = 0
    finished_at: float | None = None

    async with app.router.lifespan_context(app) as state:
        transport = httpx.ASGITransport(app=app)
        # httpx's ASGITransport does not run the lifespan: hand its state to the requests.
        assert state is not None
        app.state.ratchet = state["ratchet"]
        async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
            holder = threading.Thread(target=hold_write_lock)
            holder.start()
            locked.wait(5)

            async def post() -> httpx.Response:
                nonlocal finished_at
                response = await client.post("/slugs", params={"title": "Blocked Maybe"})
                finished_at = time.monotonic()
                return response

            async def tick() -> None:
                nonlocal ticks
                while finished_at is None:
                    ticks += 1
                    await anyio.sleep(0.01)

            responses: list[httpx.Response] = []
            async with anyio.create_task_group() as group:
                group.start_soon(tick)

                async def run_post() -> None:
                    responses.append(await post())

                group.start_soon(run_post)
                await anyio.sleep(1.0)
                ticks_while_locked = ticks
                assert finished_at is None, "the enqueue did not wait for the write lock"
                release.set()
            holder.join(5)

    assert responses[0].status_code == 202
    # The loop kept running (~100 ticks of 10 ms; a blocked loop gives 1) while the INSERT
    # waited on another thread.
    assert ticks_while_locked >= 20


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_lifespan_fails_startup_on_a_bad_deployment(tmp_path: Path) -> None:
    from fastapi import FastAPI

    from ratchet_core.contrib.fastapi import ratchet_lifespan

    def broken() -> RatchetContainer:
        return RatchetContainer(
            overrides={
                "store.url": f"sqlite:///{tmp_path / 'x.db'}",
                "alternatives.modules": "tests.integrations.django_project.tied_alternatives",
            }
        )

    from ratchet_api.errors import AmbiguousAlternativeError

    with (
        pytest.raises(AmbiguousAlternativeError),
        TestClient(FastAPI(lifespan=ratchet_lifespan(broken))),
    ):
        pass
