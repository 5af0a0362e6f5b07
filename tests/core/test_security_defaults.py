"""Error sanitizer, payload masking and the package-prefix class policy."""

from __future__ import annotations

import pytest

from ratchet_core.defaults.security import (
    DefaultErrorSanitizer,
    DefaultPayloadMaskingPolicy,
    PackagePrefixClassPolicy,
)
from ratchet_core.runtime.config import DefaultRatchetConfig


class PaymentDeclined(Exception):
    pass


sanitize = DefaultErrorSanitizer().sanitize


def test_sanitizer_keeps_the_class_name_and_a_harmless_message() -> None:
    assert sanitize(ValueError("order 42 has no lines")) == "ValueError: order 42 has no lines"
    assert sanitize(PaymentDeclined("card expired")).startswith(
        "tests.core.test_security_defaults.PaymentDeclined: card expired"
    )


@pytest.mark.parametrize(
    ("message", "secret"),
    [
        ("cannot connect to postgresql://app:s3cr3tpw@db.internal:5432/prod", "s3cr3tpw"),
        ("mysql+pymysql://root:hunter2@127.0.0.1/x refused", "hunter2"),
        ("GET https://bob:pa55@api.example.com/v1 failed", "pa55"),
        ("login failed for alice@example.com", "alice@example.com"),
        ("password=topsecret rejected", "topsecret"),
        ("bad config: {'api_key': 'AKIA123456789'}", "AKIA123456789"),
        ("token: eyJhbGciOiJIUzI1NiJ9.abc", "eyJhbGciOiJIUzI1NiJ9"),
        ("api-key=abcdef0123 invalid", "abcdef0123"),
        ("client_secret=zzz-top", "zzz-top"),
        ('{"secret": "value with spaces"}', "value with spaces"),
        ("Authorization: Bearer abcdefghijklmnop", "abcdefghijklmnop"),
        ("jdbc:postgresql://db/prod?user=admin&password=pw123", "pw123"),
    ],
)
def test_sanitizer_strips_credentials(message: str, secret: str) -> None:
    text = sanitize(RuntimeError(message))
    assert secret not in text
    assert text.startswith("RuntimeError: ")
    assert "***" in text


def test_sanitizer_keeps_the_host_of_a_database_url() -> None:
    text = sanitize(OSError("postgresql://app:pw@db.internal:5432/prod unreachable"))
    assert "db.internal:5432/prod unreachable" in text


def test_sanitizer_truncates_to_2000_characters() -> None:
    text = sanitize(ValueError("x" * 10_000))
    assert len(text) == 2000
    assert text.endswith("[truncated]")


def test_sanitizer_never_raises_for_a_broken_str() -> None:
    class Broken(Exception):
        def __str__(self) -> str:
            raise RuntimeError("boom")

    assert sanitize(Broken()).endswith("Broken")


def test_sanitizer_without_message_returns_the_class_name() -> None:
    assert sanitize(KeyError()) == "KeyError"


masking = DefaultPayloadMaskingPolicy()


@pytest.mark.parametrize(
    "field",
    [
        "password",
        "PASSWORD",
        "db_password",
        "userPassword",
        "passwd",
        "token",
        "access_token",
        "refresh-token",
        "secret",
        "client_secret",
        "api_key",
        "api-key",
        "apiKey",
        "ssn",
        "customer_ssn",
        "credit_card",
        "creditCardNumber",
        "card_number",
        "cvv",
        "authorization",
        "Authorization",
        "private_key",
    ],
)
def test_masking_flags_sensitive_fields(field: str) -> None:
    assert masking.is_sensitive_field(field)


@pytest.mark.parametrize(
    "field", ["name", "amount", "classname", "order_id", "author", "shipping_address", ""]
)
def test_masking_leaves_ordinary_fields(field: str) -> None:
    assert not masking.is_sensitive_field(field)


def test_masking_extra_fields_are_matched_ignoring_case_and_separators() -> None:
    policy = DefaultPayloadMaskingPolicy(extra_fields=["iban"])
    assert policy.is_sensitive_field("IBAN")
    assert not DefaultPayloadMaskingPolicy().is_sensitive_field("iban")


def test_class_policy_is_empty_by_default() -> None:
    policy = PackagePrefixClassPolicy.from_settings(DefaultRatchetConfig.from_dict({}))
    assert not policy.is_allowed("myapp.models.Order")


def test_class_policy_matches_package_prefixes_on_dot_boundaries() -> None:
    policy = PackagePrefixClassPolicy.from_settings(
        DefaultRatchetConfig.from_dict({"security.allowed_packages": "myapp, billing.jobs"})
    )
    assert policy.is_allowed("myapp.models.Order")
    assert policy.is_allowed("myapp")
    assert policy.is_allowed("billing.jobs.charge")
    assert not policy.is_allowed("myapplication.Order")
    assert not policy.is_allowed("billing.models.Invoice")
    assert not policy.is_allowed("")


def test_class_policy_wildcard_allows_everything_but_empty_names() -> None:
    policy = PackagePrefixClassPolicy(["*"])
    assert policy.is_allowed("anything.at.All")
    assert not policy.is_allowed("")
