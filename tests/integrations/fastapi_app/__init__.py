"""A FastAPI app for the integration tests."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from fastapi import FastAPI

from ratchet_core.contrib.fastapi import Scheduler, aenqueue, arun_sync, ratchet_lifespan
from ratchet_core.runtime.container import RatchetContainer
from tests.integrations.fastapi_app.jobs import slugify


def create_app(store_url: str, *, run_worker: bool = False) -> FastAPI:
    def container() -> RatchetContainer:
        return RatchetContainer(
            overrides={
                "store.url": store_url,
                "security.allowed_packages": "tests.integrations",
                "worker.poll_interval": "20ms",
            }
        )

    app = FastAPI(lifespan=ratchet_lifespan(container, run_worker=run_worker))

    @app.post("/slugs", status_code=202)
    async def create_slug(title: str, scheduler: Scheduler) -> dict[str, str]:
        job_id = await aenqueue(scheduler, slugify, title)
        return {"job_id": str(job_id)}

    @app.get("/slugs/{job_id}")
    async def show_slug(job_id: UUID, scheduler: Scheduler) -> dict[str, Any]:
        result = await arun_sync(scheduler.result, job_id)
        return {"status": str(result.status), "value": result.value}

    return app
