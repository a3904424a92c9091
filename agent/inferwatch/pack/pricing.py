"""The optional ``pricing:`` section of thresholds.yaml: what a GPU-hour costs.

A price applies to a GPU (or MIG device) by the ``name`` label of
``inferwatch_gpu_info`` (a regular expression, anchored as PromQL anchors
``=~``), or by the instance type its agent runs on (a target label the scrape
config puts on the agent's series, ``instance_type`` unless
``instance_type_label`` says otherwise; docs/cost.md shows the relabelling). An
instance price is per instance-hour with the instance's GPU count, and becomes
a price per GPU-hour. The first entry that matches a GPU wins::

    pricing:
      currency: USD
      prices:
        - instance_type: p5.48xlarge
          per_instance_hour: 98.32
          gpus: 8
        - gpu_name: "NVIDIA H100.*"
          per_gpu_hour: 2.49

With no prices (the default) the pack reports GPU-hours only. This module only
parses and validates; ``pack.rules.cost`` turns a :class:`Pricing` into PromQL.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from inferwatch.engines import contract
from inferwatch.errors import ConfigError

KEYS = ("currency", "instance_type_label", "prices")
GPU_NAME_KEYS = ("gpu_name", "per_gpu_hour")
INSTANCE_KEYS = ("instance_type", "per_instance_hour", "gpus", "per_gpu_hour")
DEFAULT_INSTANCE_TYPE_LABEL = "instance_type"

_CURRENCY_RE = re.compile(r"[A-Z]{3}")
_LABEL_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Python syntax that RE2 (Prometheus' regex engine) refuses
_NOT_RE2 = re.compile(r"\(\?[=!]|\(\?<[=!]|\\[1-9]")


@dataclass(frozen=True)
class Price:
    """One entry of ``pricing.prices``: a price per GPU-hour and what it matches."""

    per_gpu_hour: float
    gpu_name: str | None = None
    instance_type: str | None = None

    @property
    def describe(self) -> str:
        if self.gpu_name is not None:
            return f"GPU name ~ {self.gpu_name}"
        return f"instance type {self.instance_type}"


@dataclass(frozen=True)
class Pricing:
    currency: str | None = None
    instance_type_label: str = DEFAULT_INSTANCE_TYPE_LABEL
    prices: tuple[Price, ...] = ()

    @property
    def enabled(self) -> bool:
        return bool(self.prices)


def _amount(source: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(source, key, "a price greater than 0", value)
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ConfigError(source, key, "a price greater than 0", value)
    return number


def _text(source: str, key: str, value: Any, expected: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(source, key, expected, value)
    return value.strip()


def _gpu_name(source: str, key: str, value: Any) -> str:
    expected = f"a regular expression matching {contract.GPU_INFO}'s name, such as 'NVIDIA H100.*'"
    pattern = _text(source, key, value, expected)
    try:
        re.compile(pattern)
    except re.error:
        raise ConfigError(source, key, expected, value) from None
    if _NOT_RE2.search(pattern):
        raise ConfigError(
            source, key, "a regular expression without lookaround or backreferences (RE2)", value
        )
    return pattern


def _entry(source: str, key: str, raw: Any) -> Price:
    if not isinstance(raw, dict):
        raise ConfigError(source, key, "a mapping with gpu_name or instance_type and a price", raw)
    if ("gpu_name" in raw) == ("instance_type" in raw):
        raise ConfigError(source, key, "exactly one of gpu_name or instance_type")
    allowed = GPU_NAME_KEYS if "gpu_name" in raw else INSTANCE_KEYS
    for k in raw:
        if k not in allowed:
            raise ConfigError(source, f"{key}.{k}", "one of the known keys " + ", ".join(allowed))
    if "gpu_name" in raw:
        if "per_gpu_hour" not in raw:
            raise ConfigError(source, f"{key}.per_gpu_hour", "a price per GPU-hour (missing)")
        return Price(
            per_gpu_hour=_amount(source, f"{key}.per_gpu_hour", raw["per_gpu_hour"]),
            gpu_name=_gpu_name(source, f"{key}.gpu_name", raw["gpu_name"]),
        )
    instance = _text(
        source, f"{key}.instance_type", raw["instance_type"], "an instance type such as p5.48xlarge"
    )
    if "per_gpu_hour" in raw:
        if "per_instance_hour" in raw or "gpus" in raw:
            raise ConfigError(
                source, key, "either per_gpu_hour or per_instance_hour with gpus, not both"
            )
        return Price(
            per_gpu_hour=_amount(source, f"{key}.per_gpu_hour", raw["per_gpu_hour"]),
            instance_type=instance,
        )
    if "per_instance_hour" not in raw:
        raise ConfigError(
            source, f"{key}.per_instance_hour", "a price per instance-hour (or per_gpu_hour)"
        )
    per_instance = _amount(source, f"{key}.per_instance_hour", raw["per_instance_hour"])
    gpus = raw.get("gpus")
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 1:
        raise ConfigError(
            source, f"{key}.gpus", "the instance's GPU count, a whole number >= 1", gpus
        )
    return Price(per_gpu_hour=per_instance / gpus, instance_type=instance)


def parse_pricing(raw: Any, source: str, key: str = "pricing") -> Pricing:
    """Validate the ``pricing:`` mapping; raises :class:`ConfigError` naming the key."""
    if raw is None:
        return Pricing()
    if not isinstance(raw, dict):
        raise ConfigError(source, key, "a mapping with currency and prices", raw)
    for k in raw:
        if k not in KEYS:
            raise ConfigError(source, f"{key}.{k}", "one of the known keys " + ", ".join(KEYS))
    label = raw.get("instance_type_label", DEFAULT_INSTANCE_TYPE_LABEL)
    if not isinstance(label, str) or not _LABEL_RE.fullmatch(label):
        raise ConfigError(source, f"{key}.instance_type_label", "a Prometheus label name", label)
    entries = raw.get("prices") or []
    if not isinstance(entries, list):
        raise ConfigError(source, f"{key}.prices", "a list of prices", entries)
    prices = tuple(_entry(source, f"{key}.prices[{i}]", e) for i, e in enumerate(entries))
    currency = raw.get("currency")
    if (currency is not None or prices) and (
        not isinstance(currency, str) or not _CURRENCY_RE.fullmatch(currency)
    ):
        raise ConfigError(
            source, f"{key}.currency", "a three-letter currency code such as USD", currency
        )
    return Pricing(currency=currency, instance_type_label=label, prices=prices)
