"""A small Flask shop: POST /orders creates an order and enqueues its receipt in the same
database transaction; GET /jobs/<id> shows the job's status and result.

    python app.py        # web server on :5000 plus a worker thread
    flask --app app ratchet worker   # or a separate worker process
"""

from __future__ import annotations

import threading
from uuid import UUID

from flask import Flask, jsonify, request
from flask.typing import ResponseReturnValue
from flask_sqlalchemy import SQLAlchemy
from jobs import send_receipt
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ratchet_api.store.protocols import SchemaManager
from ratchet_core.contrib.flask import Ratchet, enqueue, get_scheduler, get_state


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)
ratchet = Ratchet()


class Order(db.Model):  # type: ignore[name-defined,misc]
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str]


def create_app() -> Flask:
    app = Flask(__name__)
    app.config.update(
        SQLALCHEMY_DATABASE_URI="sqlite:///shop.db",  # Ratchet's jobs live here too
        RATCHET_SECURITY_ALLOWED_PACKAGES="jobs",
    )
    db.init_app(app)
    ratchet.init_app(app)
    with app.app_context():
        db.create_all()
        # the same as `flask --app app ratchet db upgrade`
        get_state(app).container.job_store().capability(SchemaManager).upgrade()

    @app.post("/orders")
    def create_order() -> ResponseReturnValue:
        order = Order(email=request.form.get("email", "ada@example.com"))
        db.session.add(order)
        db.session.flush()
        job_id = enqueue(send_receipt, order.id, order.email)  # joins db.session
        db.session.commit()  # the order and its job commit together
        return jsonify(order_id=order.id, job_id=str(job_id), status_url=f"/jobs/{job_id}"), 201

    @app.get("/jobs/<job_id>")
    def show_job(job_id: str) -> ResponseReturnValue:
        result = get_scheduler().result(UUID(job_id))
        return jsonify(status=str(result.status), value=result.value, error=result.error)

    return app


if __name__ == "__main__":
    app = create_app()
    worker = get_state(app).container.worker()
    threading.Thread(
        target=worker.run_forever, kwargs={"install_signal_handlers": False}, daemon=True
    ).start()
    app.run(port=5000)
