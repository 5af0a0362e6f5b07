"""Creating and managing recurring definitions: ``scheduler.recurring(...)`` and
``scheduler.recurring_jobs``.

Everything is validated when the definition is declared (schedule, time zone, misfire policy,
target and arguments through the ``JobInvocationResolver``, job options), never in a worker.
Declaring is create-or-update by id and idempotent: declaring the same definition again writes
nothing, and a changed definition keeps its pause state and, when its schedule did not change,
its next fire time (so redeploying never fires or skips a slot).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

import attrs

from ratchet_api.errors import (
    InvalidJobError,
    InvalidScheduleError,
    RecurringJobNotFoundError,
    UnsupportedCapabilityError,
)
from ratchet_api.model import BackoffPolicy, JobPriority
from ratchet_api.spi.payload import JobInvocationResolver
from ratchet_api.store.entities import MisfirePolicy, RecurringJobEntity
from ratchet_api.store.protocols import JobStore, RecurringJobStore
from ratchet_core.enqueue.options import (
    check_backoff,
    check_key,
    check_max_retries,
    check_tags,
    parse_priority,
)
from ratchet_core.features.recurring.schedule import Schedule, interval_expression, parse_schedule
from ratchet_core.features.recurring.template import (
    MAX_ID_LENGTH,
    JobTemplate,
    decode_template,
    job_for,
)
from ratchet_core.payload.forms import encode_backoff, encode_invocation

if TYPE_CHECKING:
    from ratchet_core.enqueue.submitter import Submitter

_ID = re.compile(r"^[A-Za-z0-9_.:/\-]+$")


def check_recurring_id(value: Any) -> str:
    if not isinstance(value, str) or not _ID.match(value):
        raise InvalidJobError(
            f"recurring id {value!r} must be a non-empty string of letters, digits and . _ : / -"
        )
    if len(value) > MAX_ID_LENGTH:
        raise InvalidJobError(
            f"recurring id {value[:30]!r}... is {len(value)} characters, the limit is "
            f"{MAX_ID_LENGTH}"
        )
    return value


def parse_misfire(value: MisfirePolicy | str) -> MisfirePolicy:
    """A ``MisfirePolicy`` from itself or its name, any case (``"skip"``, ``"fire_once"``,
    ``"fire_all"``)."""
    if isinstance(value, MisfirePolicy):
        return value
    if isinstance(value, str):
        try:
            return MisfirePolicy[value.strip().upper().replace("-", "_")]
        except KeyError:
            pass
    names = ", ".join(p.value.lower() for p in MisfirePolicy)
    raise InvalidScheduleError(f"misfire policy {value!r} is not one of {names}")


def schedule_expression(cron: str | timedelta | None, every: timedelta | None) -> str:
    if cron is not None and every is not None:
        raise InvalidScheduleError("give a cron expression or every=timedelta(...), not both")
    if isinstance(cron, timedelta):
        return interval_expression(cron)
    if every is not None:
        return interval_expression(every)
    if cron is None:
        raise InvalidScheduleError("a recurring job needs a cron expression or every=timedelta")
    if not isinstance(cron, str):
        raise InvalidScheduleError(f"cron must be a string, got {cron!r}")
    if cron.strip().lower().startswith("@every"):
        raise InvalidScheduleError(f"write intervals as every=timedelta(...), not {cron!r}")
    return " ".join(cron.split())


@attrs.frozen(kw_only=True)
class RecurringOptions:
    """The validated options of a declaration (everything but id, schedule and target)."""

    tz: str = "UTC"
    misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    priority: int = JobPriority.NORMAL
    tags: tuple[str, ...] = ()
    max_retries: int | None = None
    backoff: BackoffPolicy | None = None
    execution_target: str | None = None
    max_instances: int | None = None

    @classmethod
    def of(
        cls,
        *,
        tz: str = "UTC",
        misfire: MisfirePolicy | str = MisfirePolicy.FIRE_ONCE,
        priority: JobPriority | int | str = JobPriority.NORMAL,
        tags: Sequence[str] = (),
        max_retries: int | None = None,
        backoff: BackoffPolicy | float | timedelta | None = None,
        execution_target: str | None = None,
        max_instances: int | None = None,
    ) -> RecurringOptions:
        if isinstance(tags, str):
            tags = (tags,)
        if max_instances is not None and (
            isinstance(max_instances, bool)
            or not isinstance(max_instances, int)
            or max_instances < 1
        ):
            raise InvalidJobError(
                f"recurring option 'max_instances': must be a positive integer, got {max_instances!r}"
            )
        return cls(
            tz=tz,
            misfire=parse_misfire(misfire),
            priority=parse_priority(priority),
            tags=check_tags(tuple(tags)),
            max_retries=None if max_retries is None else check_max_retries(max_retries),
            backoff=check_backoff(backoff),
            execution_target=(
                None
                if execution_target is None
                else check_key("execution_target", execution_target)
            ),
            max_instances=max_instances,
        )


OPTION_NAMES = frozenset(attrs.fields_dict(RecurringOptions))


class RecurringService:
    """Declares and manages recurring definitions in one store. Thread safe.

    Methods raise ``UnsupportedCapabilityError`` when the store lacks ``RecurringJobStore``,
    ``RecurringJobNotFoundError`` for an unknown id (except ``get``, which returns None)."""

    def __init__(
        self,
        *,
        store: JobStore,
        resolver: JobInvocationResolver,
        default_max_retries: int,
        wake: Callable[[int, str | None], None] | None = None,
        pipeline: Submitter | None = None,
    ) -> None:
        self._store = store
        self._resolver = resolver
        self._default_max_retries = default_max_retries
        self._wake = wake
        # seals templates and the jobs they fire (without it: plaintext, as before encryption)
        self._pipeline = pipeline

    def _rec(self, feature: str) -> RecurringJobStore:
        rec = self._store.capability(RecurringJobStore)
        if rec is None:
            raise UnsupportedCapabilityError("RecurringJobStore", feature)
        return rec

    # ------------------------------------------------------------ declaring

    def prepare(
        self,
        recurring_id: str,
        cron: str | timedelta | None,
        fn: Callable[..., Any],
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        every: timedelta | None = None,
        options: RecurringOptions | None = None,
    ) -> tuple[RecurringJobEntity, Schedule]:
        """Validate a declaration without writing it: the definition (next fire time not yet
        set) and its parsed schedule."""
        check_recurring_id(recurring_id)
        opts = options or RecurringOptions()
        expression = schedule_expression(cron, every)
        schedule = parse_schedule(expression, opts.tz)
        invocation = self._resolver.resolve(fn, list(args), dict(kwargs or {}))
        if self._pipeline is not None:
            stored_invocation = self._pipeline.seal_template(invocation, recurring_id)
        else:
            stored_invocation = encode_invocation(invocation)
        template = JobTemplate(
            invocation=stored_invocation,
            tags=opts.tags,
            backoff=encode_backoff(opts.backoff),
            execution_target=opts.execution_target,
            max_instances=opts.max_instances,
        )
        definition = RecurringJobEntity(
            name=recurring_id,
            cron=expression,
            timezone=opts.tz,
            target=invocation.target,
            payload=template.encode(),
            priority=opts.priority,
            max_retries=(
                opts.max_retries if opts.max_retries is not None else self._default_max_retries
            ),
            next_fire_at=datetime(1970, 1, 1, tzinfo=UTC),
            misfire_policy=opts.misfire,
        )
        return definition, schedule

    def declare(
        self,
        recurring_id: str,
        cron: str | timedelta | None,
        fn: Callable[..., Any],
        /,
        *args: Any,
        every: timedelta | None = None,
        kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> RecurringJobEntity:
        """Create or update the definition ``recurring_id``; returns it as stored."""
        unknown = sorted(set(options) - OPTION_NAMES)
        if unknown:
            raise InvalidJobError(
                f"unknown recurring option(s) {', '.join(map(repr, unknown))}; use "
                f"{', '.join(sorted(OPTION_NAMES))} (target arguments go in kwargs={{...}})"
            )
        definition, schedule = self.prepare(
            recurring_id,
            cron,
            fn,
            args,
            kwargs,
            every=every,
            options=RecurringOptions.of(**options),
        )
        return self.save(definition, schedule)

    def save(self, definition: RecurringJobEntity, schedule: Schedule) -> RecurringJobEntity:
        """Store a prepared definition (create or update, see the module doc)."""
        rec = self._rec("recurring jobs")
        existing = rec.find_recurring(definition.name)
        now = self._store.server_now()
        if existing is None:
            stored = attrs.evolve(definition, next_fire_at=schedule.next_after(now), created_at=now)
        else:
            same_schedule = (existing.cron, existing.timezone) == (
                definition.cron,
                definition.timezone,
            )
            stored = attrs.evolve(
                definition,
                payload=self._same_template(existing, definition),
                next_fire_at=(existing.next_fire_at if same_schedule else schedule.next_after(now)),
                last_fired_at=existing.last_fired_at,
                enabled=existing.enabled,
                created_at=existing.created_at,
            )
            if stored == existing:
                return existing
        return rec.save_recurring(stored)

    def _same_template(self, existing: RecurringJobEntity, declared: RecurringJobEntity) -> str:
        """The existing stored template when it holds what ``declared`` holds (a sealed one
        differs in its random nonce at every declaration: comparing the opened texts keeps a
        worker's start from rewriting every unchanged definition), else the declared one."""
        if self._pipeline is None or existing.payload == declared.payload:
            return declared.payload
        codec = self._pipeline.codec
        try:
            old, new = decode_template(existing), decode_template(declared)
            same = (
                attrs.evolve(old, invocation="") == attrs.evolve(new, invocation="")
                and (
                    codec.open_template(old.invocation, existing.name)
                    == codec.open_template(new.invocation, declared.name)
                )
                and codec.is_sealed(old.invocation) == codec.is_sealed(new.invocation)
            )
        except Exception:  # noqa: BLE001 - unreadable: the declaration replaces it
            same = False
        return existing.payload if same else declared.payload

    # ------------------------------------------------------------ managing

    def get(self, recurring_id: str) -> RecurringJobEntity | None:
        """The stored definition, or None."""
        return self._rec("recurring jobs").find_recurring(recurring_id)

    def list(self) -> list[RecurringJobEntity]:
        """Every definition, by id."""
        return self._rec("recurring jobs").list_recurring()

    def require(self, recurring_id: str) -> RecurringJobEntity:
        found = self.get(recurring_id)
        if found is None:
            raise RecurringJobNotFoundError(recurring_id)
        return found

    def pause(self, recurring_id: str) -> bool:
        """Stop firing (slots while paused are not fired); False if already paused."""
        return self._set_enabled(recurring_id, False)

    def resume(self, recurring_id: str) -> bool:
        """Fire again from the first slot after now (slots missed while paused are not
        caught up); False if not paused."""
        return self._set_enabled(recurring_id, True)

    def _set_enabled(self, recurring_id: str, enabled: bool) -> bool:
        current = self.require(recurring_id)
        if current.enabled is enabled:
            return False
        changed = attrs.evolve(current, enabled=enabled)
        if enabled:
            schedule = parse_schedule(current.cron, current.timezone)
            now = self._store.server_now()
            if current.next_fire_at <= now:
                changed = attrs.evolve(
                    changed, next_fire_at=schedule.next_after(now, current.next_fire_at)
                )
        self._rec("recurring jobs").save_recurring(changed)
        return True

    def delete(self, recurring_id: str) -> bool:
        """Remove the definition (jobs it already fired stay); False if it did not exist."""
        return self._rec("recurring jobs").delete_recurring(recurring_id)

    def trigger_now(self, recurring_id: str) -> UUID:
        """Run the definition's job once now, outside its schedule (no slot is consumed; works
        while paused). Returns the job id."""
        definition = self.require(recurring_id)
        template = decode_template(definition)
        job = job_for(definition, template, slot=None, now=self._store.server_now())
        if self._pipeline is not None:
            job = self._pipeline.seal_fired(job, template.invocation, definition.name)
        stored = self._store.insert_job(job)
        if self._wake is not None:
            self._wake(job.priority, job.execution_target)
        return stored.id


__all__ = [
    "OPTION_NAMES",
    "RecurringOptions",
    "RecurringService",
    "check_recurring_id",
    "parse_misfire",
    "schedule_expression",
]
