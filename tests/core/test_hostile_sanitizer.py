"""The default error sanitizer and the sanitized traceback against hostile messages (issue 26)
and custom sanitizers over chained causes (issue 25)."""

from __future__ import annotations

import pytest

from ratchet_core.defaults.security import DefaultErrorSanitizer, bound_text, redact
from ratchet_core.worker.tracebacks import sanitized_traceback

sanitize = DefaultErrorSanitizer().sanitize


@pytest.mark.parametrize(
    ("message", "secret"),
    [
        ("postgresql://app:p@ss/w0rd@db.internal:5432/prod down", "w0rd"),
        ("mysql://root:a/b@c@127.0.0.1/x", "a/b@c"),
        ("env DB_PASSWORD=hunter2 set", "hunter2"),
        ("PGPASSWORD='pg secret' psql", "pg secret"),
        ("MYSQL_PWD=abc123 DB_PASS=zz9", "abc123"),
        ("DB_PASS=zz9 ok", "zz9"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
        ("key AKIAIOSFODNN7EXAMPLE denied", "AKIAIOSFODNN7EXAMPLE"),
        ("bare wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY here", "wJalrXUtnFEMI"),
        (
            "jwt eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0In0.dozjgNryP4J3jVmNHl0w5N",
            "eyJzdWIiOiIxMjM0In0",
        ),
        ("card 4111 1111 1111 1111 declined", "4111 1111 1111 1111"),
        ("card 4111-1111-1111-1111 declined", "4111-1111-1111-1111"),
        ("card 5500005555555559 declined", "5500005555555559"),
        ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc rejected", "4eC39HqLyjWDarjtT1zdp7dc"),
        ("hook whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw bad", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
        (
            "key -----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
            "MIIEpAIBAAKCAQEA",
        ),
        ("cut key -----BEGIN EC PRIVATE KEY-----\nMHcCAQEEIBb", "MHcCAQEEIBb"),
    ],
)
def test_each_kind_of_secret_is_redacted(message: str, secret: str) -> None:
    text = sanitize(RuntimeError(message))
    assert secret not in text
    assert "***" in text


@pytest.mark.parametrize(
    "message",
    [
        "commit 3f786850e387550fdab836ed7e6dc881de23001b failed",  # a git id is no AWS secret
        "order 4111111111111112 not found",  # fails the Luhn check
        "bypass=1 compass=north spinner=3",  # secret words inside other words
        "retry 3 of 5 after 2.5s",
    ],
)
def test_harmless_text_is_kept(message: str) -> None:
    assert sanitize(ValueError(message)) == f"ValueError: {message}"


def test_a_huge_message_is_cut_before_matching_and_leaves_no_half_secret() -> None:
    card = "4111 1111 1111 1111"
    text = sanitize(RuntimeError("x " * 995 + card + " tail" * 200_000))
    assert len(text) == 2000 and text.endswith("[truncated]")
    assert "4111 1111" not in text
    cut = bound_text("word " * 10 + "4111 1111 1111 1111", 58)
    assert cut.endswith("[cut]") and "4111" not in cut.replace("[cut]", "")


def test_redact_reads_at_most_its_limit() -> None:
    assert len(redact("a" * 1_000_000, 1000)) <= 1000
    # patterns that used to rescan a run from each of its positions (quadratic) stay correct
    assert redact("x@" * 10 + "user@example.com").endswith("***@***")


class Upper:
    """A custom sanitizer: the class name and the message upper-cased."""

    def sanitize(self, error: BaseException) -> str:
        return f"{type(error).__name__}: {str(error).upper()}"


class Exploding:
    def sanitize(self, error: BaseException) -> str:
        raise RuntimeError(f"sanitizer broke on {error}")


# built at run time: the traceback shows source lines, which must not hold the messages
INNER, MIDDLE, OUTER = (
    f"{where} secret-{tag}" for where, tag in zip(("inner", "middle", "outer"), "abc", strict=True)
)


def chained() -> BaseException:
    try:
        try:
            raise KeyError(INNER)
        except KeyError as exc:
            raise ValueError(MIDDLE) from exc
    except ValueError:
        try:
            raise RuntimeError(OUTER)
        except RuntimeError as exc:
            return exc
    raise AssertionError("unreachable")


def test_a_custom_sanitizer_writes_every_exception_line_of_the_chain() -> None:
    text = sanitized_traceback(chained(), Upper())
    for secret in ("secret-a", "secret-b", "secret-c"):
        assert secret not in text
        assert secret.upper() in text
    assert text.index("INNER") < text.index("MIDDLE") < text.index("OUTER")
    assert "direct cause" in text and "During handling" in text
    assert text.rstrip().endswith("RuntimeError: OUTER SECRET-C")


class Counting(Upper):
    def __init__(self) -> None:
        self.asked: list[BaseException] = []

    def sanitize(self, error: BaseException) -> str:
        self.asked.append(error)
        return super().sanitize(error)


def test_the_message_already_sanitized_ends_the_traceback_and_is_not_asked_again() -> None:
    error, sanitizer = chained(), Counting()
    text = sanitized_traceback(error, sanitizer, message="RuntimeError: GIVEN")
    assert text.rstrip().endswith("RuntimeError: GIVEN")
    assert error not in sanitizer.asked and len(sanitizer.asked) == 2  # the two causes


def test_a_secret_in_a_source_line_is_redacted_every_time_the_frame_fails() -> None:
    def failing() -> None:
        raise ValueError("boom")  # postgresql://app:hunter2@db/x

    for _ in range(3):  # the frame's redaction is remembered after the first failure
        try:
            failing()
        except ValueError as exc:
            text = sanitized_traceback(exc, Upper())
        assert "hunter2" not in text and "postgresql://***@db/x" in text


def test_a_raising_sanitizer_withholds_every_message() -> None:
    text = sanitized_traceback(chained(), Exploding())
    for secret in ("secret-a", "secret-b", "secret-c"):
        assert secret not in text
    assert text.rstrip().endswith("RuntimeError (message withheld: the error sanitizer failed)")


def test_a_newline_in_an_error_cannot_forge_a_log_line() -> None:
    from ratchet_core.observability.logs import escape_controls

    forged = "boom\n2026-01-01 INFO job 1 succeeded\x1b[2J"
    text = escape_controls(sanitize(RuntimeError(forged)), keep_newlines=True)
    assert "\x1b" not in text and "\\x1b[2J" in text
    assert all(line.startswith(" ") for line in text.splitlines()[1:])
