"""The test runner of the upstream-suite runs: Django's, plus one thing upstream's suite gets
from its backend for free. django-tasks-db keeps results in a Django model, so the flush after
each ``TransactionTestCase`` empties them; Ratchet's tables are its own (no Django models), so
this runner empties them too (every table Django does not know, but the schema version), or
a task left RUNNING by one test (a killed worker's) would be run by the next test's worker."""

from __future__ import annotations

from typing import Any

from django.db import connection
from django.test import TransactionTestCase
from django.test.runner import DiscoverRunner

from ratchet_store_sql.schema import VERSION_TABLE


def purge_ratchet_tables() -> None:
    known = set(connection.introspection.django_table_names(include_views=False))
    tables = [
        t
        for t in connection.introspection.table_names(include_views=False)
        if t not in known and t != VERSION_TABLE and not t.startswith("sqlite_")
    ]
    with connection.constraint_checks_disabled(), connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f'DELETE FROM "{table}"')


class Runner(DiscoverRunner):
    def setup_test_environment(self, **kwargs: Any) -> None:
        super().setup_test_environment(**kwargs)
        flush = TransactionTestCase._fixture_teardown

        def teardown(case: TransactionTestCase) -> None:
            flush(case)
            purge_ratchet_tables()

        TransactionTestCase._fixture_teardown = teardown  # type: ignore[method-assign]
