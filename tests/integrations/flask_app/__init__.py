"""A small Flask app for the integration tests: Flask-SQLAlchemy, an application container
nesting Ratchet's (with an APPLICATION-priority override), views that enqueue."""

from __future__ import annotations

import os
from typing import Any

from flask import Flask, jsonify, request
from flask.typing import ResponseReturnValue
from flask_sqlalchemy import SQLAlchemy
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ratchet_core.contrib.flask import Ratchet, enqueue, get_scheduler
from tests.integrations.flask_app.containers import create_container
from tests.integrations.flask_app.jobs import shout


class Base(DeclarativeBase):
    pass


db = SQLAlchemy(model_class=Base)
ratchet = Ratchet(container=create_container, wire=["tests.integrations.flask_app.injected"])


class Order(db.Model):  # type: ignore[name-defined,misc]
    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str]


def create_app(config: dict[str, Any] | None = None) -> Flask:
    app = Flask(__name__)
    app.config.update(
        SQLALCHEMY_DATABASE_URI=os.environ.get("RATCHET_TEST_FLASK_DB", "sqlite:///flask.db"),
        RATCHET_SECURITY_ALLOWED_PACKAGES="tests.integrations",
        RATCHET_WORKER_POLL_INTERVAL="20ms",
    )
    app.config.update(config or {})
    db.init_app(app)
    ratchet.init_app(app)
    with app.app_context():
        db.create_all()

    @app.post("/orders")
    def create_order() -> ResponseReturnValue:
        order = Order(item=request.form["item"])
        db.session.add(order)
        db.session.flush()
        job_id = enqueue(shout, order.item)
        if request.form.get("fail"):
            db.session.rollback()
            return jsonify(job_id=str(job_id), rolled_back=True), 409
        db.session.commit()
        return jsonify(job_id=str(job_id), order_id=order.id), 201

    @app.get("/jobs/<job_id>")
    def show_job(job_id: str) -> ResponseReturnValue:
        from uuid import UUID

        result = get_scheduler().result(UUID(job_id))
        return jsonify(status=str(result.status), value=result.value)

    from tests.integrations.flask_app.injected import enqueue_with_injected_scheduler

    app.add_url_rule("/injected", view_func=enqueue_with_injected_scheduler, methods=["POST"])
    return app
