"""Rules configuration: defaults.toml overlaid with a user TOML file.

The user file is ``--rules FILE`` or ``$NETTRAIL_RULES``; it only needs the keys it
changes. Unknown sections or keys and wrong types are errors naming the file and the
key, so a typo never silently leaves a default in force. Keep in sync with
defaults.toml (the single list of settings) and docs/alerts.md (their reasons).
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

Scalar = float | int | str | bool
ENV_VAR = "NETTRAIL_RULES"
NON_RULE_SECTIONS = ("engine", "notify")


class ConfigError(ValueError):
    """A rules file that cannot be used; the message names the file and the key."""


def _defaults() -> dict[str, dict[str, Scalar]]:
    text = resources.files("analysis.alerts").joinpath("defaults.toml").read_text()
    return tomllib.loads(text)


@dataclass(frozen=True)
class RulesConfig:
    sections: dict[str, dict[str, Scalar]]
    source: str = "defaults"
    _thresholds: dict[str, dict[str, float | int | str]] = field(default_factory=dict, repr=False)

    @property
    def engine(self) -> dict[str, Scalar]:
        return self.sections["engine"]

    @property
    def notify(self) -> dict[str, Scalar]:
        return self.sections["notify"]

    def rule_ids(self) -> list[str]:
        return [name for name in self.sections if name not in NON_RULE_SECTIONS]

    def enabled(self, rule_id: str) -> bool:
        return bool(self.sections[rule_id]["enabled"])

    def params(self, rule_id: str) -> dict[str, Scalar]:
        return self.sections[rule_id]

    def thresholds(self, rule_id: str) -> dict[str, float | int | str]:
        """What every alert of the rule carries: its settings without the switch."""
        cached = self._thresholds.get(rule_id)
        if cached is None:
            cached = {k: v for k, v in self.sections[rule_id].items() if not isinstance(v, bool)}
            self._thresholds[rule_id] = cached
        return cached


def _merge(base: dict[str, dict[str, Scalar]], user: Mapping[str, Any], origin: str) -> None:
    for section, values in user.items():
        if section not in base:
            raise ConfigError(f"{origin}: unknown section [{section}] (known: {', '.join(base)})")
        if not isinstance(values, Mapping):
            raise ConfigError(f"{origin}: [{section}] must be a table")
        for key, value in values.items():
            if key not in base[section]:
                known = ", ".join(base[section])
                raise ConfigError(f"{origin}: unknown key {section}.{key} (known: {known})")
            base[section][key] = _check(section, key, base[section][key], value, origin)


def _check(section: str, key: str, default: Scalar, value: Any, origin: str) -> Scalar:
    name = f"{section}.{key}"
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise ConfigError(f"{origin}: {name} must be true or false, got {value!r}")
        return value
    if isinstance(default, int | float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{origin}: {name} must be a number, got {value!r}")
        if value < 0:
            raise ConfigError(f"{origin}: {name} must be >= 0, got {value!r}")
        if isinstance(default, int) and not isinstance(value, int):
            raise ConfigError(f"{origin}: {name} must be a whole number, got {value!r}")
        return value
    if not isinstance(value, str):
        raise ConfigError(f"{origin}: {name} must be a string, got {value!r}")
    return value


def load_config(path: str | os.PathLike[str] | None = None, *, env: Mapping[str, str] | None = None) -> RulesConfig:
    """Defaults overlaid with ``path``, else with ``$NETTRAIL_RULES`` when set."""
    sections = _defaults()
    env = os.environ if env is None else env
    chosen = path if path is not None else env.get(ENV_VAR) or None
    if chosen is None:
        return RulesConfig(sections)
    origin = str(chosen)
    try:
        user = tomllib.loads(Path(chosen).read_text())
    except FileNotFoundError as exc:
        raise ConfigError(f"{origin}: rules file not found") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{origin}: not valid TOML: {exc}") from exc
    _merge(sections, user, origin)
    return RulesConfig(sections, source=origin)


def config_from_mapping(overrides: Mapping[str, Any]) -> RulesConfig:
    """Defaults overlaid with a dict of sections (tests and embedding callers)."""
    sections = _defaults()
    _merge(sections, overrides, "<overrides>")
    return RulesConfig(sections, source="<overrides>")
