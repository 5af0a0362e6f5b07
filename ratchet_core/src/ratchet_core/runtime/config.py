"""Typed configuration: keys, parsers, sources and the default ``RatchetConfig``.

A key is a ``RatchetConfigKey(name, parse, default, description)``. Every module that reads a key
defines it next to its use and registers it with :func:`register_key`, so ``ratchet config`` and
``docs/configuration.md`` can list them all from :data:`KEYS`.

Resolution order (first source that defines a key wins): the explicit overrides dict given to the
container, then environment variables (``RATCHET_`` + the upper-cased name, dots as
underscores; then the key's aliases, see :data:`ENV_ALIASES`), then a TOML file
(``RATCHET_CONFIG_FILE`` or ``./ratchet.toml``, table ``[ratchet]``), then the key's default.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import threading
import tomllib
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from ratchet_api.errors import ConfigurationError
from ratchet_api.spi.runtime import RatchetConfigKey, RatchetConfigSource

T = TypeVar("T")

KEYS: dict[str, RatchetConfigKey[Any]] = {}
"""Every registered key by name (the registry documentation and ``ratchet config`` read)."""

PATTERN_KEYS: dict[str, str] = {}
"""Keys whose name contains a placeholder (``worker.concurrency.<type>``): pattern -> meaning."""

ENV_ALIASES: dict[str, tuple[str, ...]] = {}
"""Further environment variables of a key (key name -> variables), read by
:class:`EnvironmentConfigSource` in order when the key's own variable is not set."""

_KEYS_LOCK = threading.Lock()
_log = logging.getLogger("ratchet.config")
_ALIAS = re.compile(r"RATCHET_[A-Z0-9_]+")


def register_key(
    key: RatchetConfigKey[T], *, env_aliases: Sequence[str] = ()
) -> RatchetConfigKey[T]:
    """Add ``key`` to :data:`KEYS` and return it. Registering an equal key again is a no-op;
    registering a different key under a name already taken raises ``ValueError``.

    ``env_aliases`` are further environment variables (``RATCHET_`` + upper case) that set the
    key when its own variable is not set (the key's own variable wins when both are). An alias
    may not be another key's variable or another key's alias (``ValueError``)."""
    with _KEYS_LOCK:
        existing = KEYS.get(key.name)
        if existing is not None and existing != key:
            raise ValueError(
                f"configuration key {key.name!r} is already registered with default "
                f"{existing.default!r}; choose another name"
            )
        for alias in env_aliases:
            _check_alias(key, alias)
        for name, aliases in ENV_ALIASES.items():
            if name != key.name and key.environment_variable in aliases:
                raise ValueError(
                    f"the environment variable {key.environment_variable} of {key.name!r} is "
                    f"an alias of {name!r}; choose another name"
                )
        KEYS[key.name] = key
        if env_aliases:
            known = ENV_ALIASES.get(key.name, ())
            ENV_ALIASES[key.name] = tuple(dict.fromkeys((*known, *env_aliases)))
    return key


def _check_alias(key: RatchetConfigKey[Any], alias: str) -> None:
    if not isinstance(alias, str) or not _ALIAS.fullmatch(alias):
        raise ValueError(
            f"environment alias {alias!r} of {key.name!r} must be RATCHET_ followed by upper "
            "case letters, digits and underscores"
        )
    for other in KEYS.values():
        if other.name != key.name and other.environment_variable == alias:
            raise ValueError(f"environment alias {alias} of {key.name!r} is {other.name!r}'s own")
    for name, aliases in ENV_ALIASES.items():
        if name != key.name and alias in aliases:
            raise ValueError(f"environment alias {alias} of {key.name!r} is taken by {name!r}")


def register_pattern(pattern: str, description: str) -> None:
    """Document a family of keys whose name is built at run time (``worker.concurrency.<type>``)."""
    PATTERN_KEYS[pattern] = description


# ---------------------------------------------------------------- parsers


def parse_str(raw: str) -> str:
    return raw.strip()


_N = TypeVar("_N", int, float)


def _within(value: _N, minimum: _N | None, maximum: _N | None) -> _N:
    if minimum is not None and value < minimum:
        raise ValueError(f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"must be <= {maximum}, got {value}")
    return value


def parse_int(minimum: int | None = None, maximum: int | None = None) -> Callable[[str], int]:
    """A parser of integers, optionally bounded (inclusive)."""

    def parse(raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ValueError(f"expected an integer, got {raw!r}") from None
        return _within(value, minimum, maximum)

    return parse


def parse_float(
    minimum: float | None = None, maximum: float | None = None
) -> Callable[[str], float]:
    """A parser of floats, optionally bounded (inclusive)."""

    def parse(raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ValueError(f"expected a number, got {raw!r}") from None
        if math.isnan(value):
            raise ValueError("expected a number, got NaN")
        return _within(value, minimum, maximum)

    return parse


_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


def parse_bool(raw: str) -> bool:
    """``true``/``false``, ``1``/``0``, ``yes``/``no``, ``on``/``off`` (case-insensitive)."""
    text = raw.strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"expected true/false, 1/0 or yes/no, got {raw!r}")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|s|m|h|d)?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(raw: str) -> timedelta:
    """Seconds as a number (``1.5``) or a number with a unit: ``500ms``, ``2s``, ``5m``, ``1h``,
    ``1d``. Never negative."""
    match = _DURATION.match(raw)
    if match is None:
        raise ValueError(f"expected a duration such as 2.5, 500ms, 2s, 5m or 1h, got {raw!r}")
    unit = (match.group(2) or "s").lower()
    return timedelta(seconds=float(match.group(1)) * _UNIT_SECONDS[unit])


def parse_str_list(raw: str) -> tuple[str, ...]:
    """A comma separated list; blanks around items and empty items are dropped."""
    return tuple(item.strip() for item in raw.split(",") if item.strip())


def parse_optional_str(raw: str) -> str | None:
    text = raw.strip()
    return text or None


# ---------------------------------------------------------------- keys owned by ratchet_core

STORE_URL = register_key(
    RatchetConfigKey(
        "store.url",
        parse_str,
        "sqlite:///ratchet.db",
        "Database URL of the job store; its scheme selects the installed store distribution "
        "(sqlite, postgresql, mysql/mariadb, mongodb).",
    )
)
ALTERNATIVES_MODULES: RatchetConfigKey[tuple[str, ...]] = register_key(
    RatchetConfigKey(
        "alternatives.modules",
        parse_str_list,
        (),
        "Comma separated modules imported at container build; their @alternative classes are "
        "registered (the beans.xml of this port).",
    )
)
ALTERNATIVES_ENTRY_POINTS = register_key(
    RatchetConfigKey(
        "alternatives.entry_points",
        parse_bool,
        True,
        "Load alternatives from installed distributions (entry point group ratchet.alternatives).",
    )
)


# ---------------------------------------------------------------- sources


def _describe(source: RatchetConfigSource) -> str:
    description = getattr(source, "description", None)
    return str(description) if description else type(source).__name__


def _to_raw(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)) and any(isinstance(v, Mapping) for v in value):
        return json.dumps(value, default=str)  # structured values (recurring declarations)
    if isinstance(value, (list, tuple, set, frozenset)):
        return ",".join(_to_raw(v) for v in value)
    if isinstance(value, timedelta):
        return str(value.total_seconds())
    return str(value)


class DictConfigSource:
    """Explicit values by dotted key name (``{"store.url": "sqlite:///x.db"}``). Non-string values
    are converted (``True`` -> ``"true"``, lists -> comma separated, timedelta -> seconds)."""

    description = "explicit overrides"

    def __init__(self, values: Mapping[str, Any] | None = None) -> None:
        self._values = {str(k): v for k, v in (values or {}).items()}

    def get(self, property_name: str, environment_variable: str) -> str | None:
        if property_name not in self._values or self._values[property_name] is None:
            return None
        return _to_raw(self._values[property_name])

    def names(self) -> list[str]:
        """The keys this source sets (checked against the registry: :func:`check_known_keys`)."""
        return [name for name, value in self._values.items() if value is not None]


class EnvironmentConfigSource:
    """Environment variables: ``store.url`` is read from ``RATCHET_STORE_URL``, then from the
    key's aliases (:data:`ENV_ALIASES`) in order. Read on every lookup (the config caches
    parsed values)."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ

    @property
    def description(self) -> str:
        return "environment"

    def get(self, property_name: str, environment_variable: str) -> str | None:
        env = os.environ if self._environ is None else self._environ
        return env.get(self.variable_of(property_name, environment_variable))

    def variable_of(self, property_name: str, environment_variable: str) -> str:
        """The variable that sets the key: its own when set (or when none is), else the first
        alias that is set."""
        env = os.environ if self._environ is None else self._environ
        if environment_variable in env:
            return environment_variable
        for alias in ENV_ALIASES.get(property_name, ()):
            if alias in env:
                return alias
        return environment_variable


class TomlFileConfigSource:
    """A TOML file, table ``[ratchet]``; dotted names are nested tables or quoted dotted keys::

    [ratchet]
    store.url = "postgresql+psycopg://localhost/app"
    worker.concurrency = 8
    """

    def __init__(self, path: str | os.PathLike[str] | None, *, required: bool = False) -> None:
        self.path = Path(path) if path is not None else None
        self._values: dict[str, Any] = {}
        if self.path is None:
            return
        if not self.path.is_file():
            if required:
                raise ConfigurationError(
                    "RATCHET_CONFIG_FILE", f"configuration file {self.path} does not exist"
                )
            return
        try:
            with self.path.open("rb") as fh:
                document = tomllib.load(fh)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigurationError(
                "RATCHET_CONFIG_FILE", f"cannot read TOML file {self.path}: {exc}"
            ) from exc
        table = document.get("ratchet", {})
        if not isinstance(table, dict):
            raise ConfigurationError("ratchet", f"[ratchet] in {self.path} must be a table")
        self._values = dict(_flatten(table))

    @classmethod
    def discover(cls) -> TomlFileConfigSource:
        """``RATCHET_CONFIG_FILE`` if set (it must exist), else ``./ratchet.toml`` if present."""
        explicit = os.environ.get("RATCHET_CONFIG_FILE")
        if explicit:
            return cls(explicit, required=True)
        found = cls(Path.cwd() / "ratchet.toml")
        if found.path is not None and found.path.is_file():
            # A file picked up from the working directory is announced (loudly when it touches
            # security settings): whoever can write there configures Ratchet.
            security = sorted(n for n in found.names() if n.startswith("security."))
            level = logging.WARNING if security else logging.INFO
            _log.log(
                level,
                "configuration read from %s (found in the working directory)%s",
                found.path,
                f"; it sets {', '.join(security)}" if security else "",
            )
        return found

    @property
    def description(self) -> str:
        return f"TOML file {self.path}" if self.path else "TOML file (none)"

    def get(self, property_name: str, environment_variable: str) -> str | None:
        value = self._values.get(property_name)
        return None if value is None else _to_raw(value)

    def names(self) -> list[str]:
        """The keys of the file's ``[ratchet]`` table (checked: :func:`check_known_keys`)."""
        return list(self._values)


def _flatten(table: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            # A table may also carry a value of its own name: `worker.concurrency = 4` next to
            # `[ratchet.worker.concurrency] async = 2` is written as key "" in TOML terms, which
            # TOML forbids, so nesting always means "more key segments".
            items.extend(_flatten(value, name + "."))
        else:
            items.append((name, value))
    return items


# ---------------------------------------------------------------- the default config


class DefaultRatchetConfig:
    """``RatchetConfig`` over an ordered chain of sources (first source defining a key wins).

    Parsed values are cached per key; thread safe. ``get`` raises ``ConfigurationError`` naming the
    key, the source and the bad value when a value does not parse.
    """

    def __init__(self, sources: Sequence[RatchetConfigSource]) -> None:
        self._sources = tuple(sources)
        self._cache: dict[str, Any] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_sources(cls, sources: Sequence[RatchetConfigSource]) -> DefaultRatchetConfig:
        return cls(sources)

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> DefaultRatchetConfig:
        """Only the given values (plus defaults); no environment, no file. Handy in tests."""
        return cls([DictConfigSource(values)])

    @property
    def sources(self) -> tuple[RatchetConfigSource, ...]:
        return self._sources

    def _lookup(self, key: RatchetConfigKey[Any]) -> tuple[str, RatchetConfigSource] | None:
        for source in self._sources:
            raw = source.get(key.name, key.environment_variable)
            if raw is not None:
                return raw, source
        return None

    def raw(self, key: RatchetConfigKey[Any]) -> str | None:
        found = self._lookup(key)
        return None if found is None else found[0]

    def source_of(self, key: RatchetConfigKey[Any]) -> str:
        """Which source defines ``key`` (``"default"`` when none does)."""
        found = self._lookup(key)
        return "default" if found is None else _describe(found[1])

    def get(self, key: RatchetConfigKey[T]) -> T:
        cache_key = key.name
        with self._lock:
            if cache_key in self._cache:
                cached: T = self._cache[cache_key]
                return cached
        found = self._lookup(key)
        if found is None:
            value = key.default
        else:
            raw, source = found
            where = _describe(source)
            if isinstance(source, EnvironmentConfigSource):
                variable = source.variable_of(key.name, key.environment_variable)
                where = f"environment variable {variable}"
            try:
                value = key.parse(raw)
            except (ValueError, TypeError) as exc:
                raise ConfigurationError(
                    key.name, f"malformed value {raw!r} from {where}: {exc}"
                ) from exc
        with self._lock:
            self._cache[cache_key] = value
        return value


# ---------------------------------------------------------------- unknown keys

_KEY_PACKAGES = ("ratchet_core",)
_SKIPPED_PACKAGES = ("ratchet_core.contrib",)
_INTEGRATION_KEY_MODULES = ("ratchet_core.contrib.django.conf",)
_all_imported = False


def import_key_modules() -> None:
    """Import every module of ratchet_core that may register keys (once per process): keys
    register themselves when their module is imported, and a command or a worker imports only
    what it uses, so a key can be valid without being registered yet."""
    global _all_imported  # a process-wide "done" flag
    if _all_imported:
        return
    import importlib
    import pkgutil

    for package_name in _KEY_PACKAGES:
        package = importlib.import_module(package_name)
        for module in pkgutil.walk_packages(package.__path__, package_name + "."):
            if module.name.startswith(_SKIPPED_PACKAGES):
                continue
            try:
                importlib.import_module(module.name)
            except ImportError:  # an optional dependency that is not installed
                continue
    for name in _INTEGRATION_KEY_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a framework that is not installed or configured
            continue
    _all_imported = True


def _pattern_matches(name: str) -> bool:
    for pattern in PATTERN_KEYS:
        parts = re.split(r"(<[^>]*>)", pattern)
        regex = "".join("[^.]+" if part.startswith("<") else re.escape(part) for part in parts)
        if re.fullmatch(regex, name):
            return True
    return False


def is_known_key(name: str) -> bool:
    """Whether ``name`` is a registered key or matches a documented key family, importing the
    modules that register keys when it is not registered yet."""
    if name in KEYS or _pattern_matches(name):
        return True
    import_key_modules()
    return name in KEYS or _pattern_matches(name)


def closest_key(name: str) -> str | None:
    """The registered key most like ``name`` (a typo's correction), or None."""
    import difflib

    candidates = list(KEYS) + list(PATTERN_KEYS)
    found = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    if found:
        return found[0]
    # "payload.masking" for "security.mask_payloads": compare the words, in any order
    words = set(re.split(r"[._]", name.lower()))
    best, score = None, 0.0
    for candidate in candidates:
        other = set(re.split(r"[._]", candidate.lower()))
        common = sum(
            max(difflib.SequenceMatcher(None, w, o).ratio() for o in other) for w in words
        ) / max(len(words), 1)
        if common > score:
            best, score = candidate, common
    return best if score >= 0.75 else None


def check_known_keys(settings: object) -> None:
    """Refuse a key set by a source that can list its keys (explicit overrides and ``--set``:
    :class:`DictConfigSource`; the ``[ratchet]`` table of a TOML file) when no installed
    component reads it: ``UnknownConfigurationKeyError`` naming the key, the source and the
    closest valid key. A typo in a security setting (``payload.masking=true``) must never be
    silent. Environment variables are not checked (the environment holds unrelated
    ``RATCHET_*`` variables). An application's own keys are known once registered with
    :func:`register_key` (in a module the application imports before building the
    container)."""
    from ratchet_api.errors import UnknownConfigurationKeyError

    for source in getattr(settings, "sources", ()):
        names = getattr(source, "names", None)
        if not callable(names):
            continue
        for name in names():
            if not is_known_key(name):
                raise UnknownConfigurationKeyError(name, _describe(source), closest_key(name))


__all__ = [
    "ALTERNATIVES_ENTRY_POINTS",
    "ALTERNATIVES_MODULES",
    "ENV_ALIASES",
    "KEYS",
    "PATTERN_KEYS",
    "STORE_URL",
    "DefaultRatchetConfig",
    "DictConfigSource",
    "EnvironmentConfigSource",
    "TomlFileConfigSource",
    "parse_bool",
    "parse_duration",
    "parse_float",
    "parse_int",
    "parse_optional_str",
    "parse_str",
    "parse_str_list",
    "check_known_keys",
    "closest_key",
    "import_key_modules",
    "is_known_key",
    "register_key",
    "register_pattern",
]
