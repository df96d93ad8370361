"""Hourly GPU prices for `estimate --gpu` and `--compare gpus`: data/gpu_prices.csv, one sourced row per GPU.

A profile's own price fields describe its own machine; a GPU asked with --gpu is priced from this file, per GPU,
and a GPU without a row is priced unknown (never the profile's price for another GPU).
"""
from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from importlib import resources

from fasttrain.hardware import gpus
from fasttrain.profiles.schema import Profile

PRICE_FILE = "data/gpu_prices.csv"


@dataclass(frozen=True)
class GpuPrice:
    gpu: str                    # as data/gpus.csv names it
    on_demand_per_hour: float | None
    spot_per_hour: float | None
    provider: str
    source: str


def _price(text: str) -> float | None:
    return float(text) if text.strip() else None


@functools.lru_cache(maxsize=1)
def load_prices() -> dict[str, GpuPrice]:
    path = resources.files("fasttrain") / "data" / "gpu_prices.csv"
    with path.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return {r["gpu"]: GpuPrice(r["gpu"], _price(r["on_demand_per_hour"]), _price(r["spot_per_hour"]),
                               r["provider"], r["source"]) for r in rows}


def machine_prices(price: GpuPrice | None, gpus_per_machine: int) -> tuple[float | None, float | None]:
    """(on-demand, spot) $/h of one machine of `gpus_per_machine` such GPUs; None where the file has no figure
    (a GPU without a row: both unknown). Pure."""
    def per_machine(value: float | None) -> float | None:
        return None if value is None else value * gpus_per_machine
    if price is None:
        return None, None
    return per_machine(price.on_demand_per_hour), per_machine(price.spot_per_hour)


def priced_for(profile: Profile, gpu_flag: str | None) -> tuple[Profile, str | None, str | None]:
    """(the profile with the hourly prices of the GPU the forecast is for, where they come from, what is unknown).

    The profile's price fields are for its own machine: kept for its own GPU. Another GPU (--gpu, --compare gpus)
    is priced per GPU from data/gpu_prices.csv x GPUs per machine; without a row, unknown."""
    hw = profile.hardware
    own = gpus.find_gpu(hw.gpu) if hw.gpu else None
    spec = gpus.get_gpu(gpu_flag) if gpu_flag else own
    if spec is None or spec is own:
        priced = hw.price_on_demand_per_hour is not None or hw.price_spot_per_hour is not None
        return profile, (f"profile {profile.name}" if priced else None), None
    row = load_prices().get(spec.name)
    on, spot = machine_prices(row, profile.world.gpus_per_node)
    hw = hw.model_copy(update={"price_on_demand_per_hour": on, "price_spot_per_hour": spot})
    source = f"{PRICE_FILE}: {row.provider}" if row else None
    unpriced = None if row else f"hourly price of {spec.name} (no row in {PRICE_FILE})"
    return profile.model_copy(update={"hardware": hw}), source, unpriced
