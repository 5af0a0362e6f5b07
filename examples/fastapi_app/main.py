"""FastAPI: endpoints enqueue with `await aenqueue(...)` (a worker thread does the blocking
INSERT, the event loop keeps serving); the lifespan builds the container and runs a worker.

    uvicorn main:app     # or: fastapi dev main.py
"""

from typing import Any
from uuid import UUID

from fastapi import FastAPI
from jobs import make_thumbnail

from ratchet_api.store.protocols import SchemaManager
from ratchet_core.contrib.fastapi import Scheduler, aenqueue, arun_sync, ratchet_lifespan
from ratchet_core.runtime.container import RatchetContainer


def create_container() -> RatchetContainer:
    container = RatchetContainer(
        overrides={"store.url": "sqlite:///jobs.db", "security.allowed_packages": "jobs"}
    )
    container.job_store().capability(SchemaManager).upgrade()  # same as `ratchet db upgrade`
    return container


app = FastAPI(lifespan=ratchet_lifespan(create_container, run_worker=True))


@app.post("/thumbnails", status_code=202)
async def create_thumbnail(image: str, scheduler: Scheduler) -> dict[str, str]:
    job_id = await aenqueue(scheduler, make_thumbnail, image, 128)
    return {"job_id": str(job_id), "status_url": f"/jobs/{job_id}"}


@app.get("/jobs/{job_id}")
async def show_job(job_id: UUID, scheduler: Scheduler) -> dict[str, Any]:
    result = await arun_sync(scheduler.result, job_id)
    return {"status": str(result.status), "value": result.value}
