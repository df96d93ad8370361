"""`--time-budget`, `--deadline` and `--max-cost`: the three ways to say how long a run may take, as seconds.

  --time-budget 90s | 15m | 2h | 1h30m     the whole command, from its start to its summary
  --deadline 23:30                          the clock time it must be done by (today, or tomorrow if already past)
  --max-cost 2.50                           US dollars at the profile's price (hardware.price_on_demand_per_hour,
                                            else price_spot_per_hour), times its GPUs per machine and machines
Parsing is pure; each bad value is a UserError naming the flag.
"""
from __future__ import annotations

import math
import re
from datetime import datetime, timedelta

from fasttrain.core.errors import Problem, UserError
from fasttrain.profiles.schema import Profile

_UNITS = {"s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(sec|min|s|m|h|d)", re.IGNORECASE)
MAX_BUDGET_S = 30 * 86400.0   # a month: anything longer is a typo
EXAMPLE = "e.g. --time-budget 90s, 15m, 2h or 1h30m"


def parse_duration(text: str, flag: str = "--time-budget") -> float:
    """'90s', '15m', '2h', '1h30m', '1.5h' -> seconds (a unit is required: '90' could be seconds or minutes)."""
    cleaned = (text or "").strip().lower().replace(" ", "")
    parts = _PART.findall(cleaned)
    if not cleaned or not parts or "".join(f"{n}{u}" for n, u in parts) != cleaned:
        raise UserError([Problem(flag, "not a duration with units", EXAMPLE, text)])
    seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not math.isfinite(seconds) or seconds <= 0 or seconds > MAX_BUDGET_S:
        raise UserError([Problem(flag, "must be more than 0 and at most 30 days", EXAMPLE, text)])
    return seconds


def deadline_seconds(hhmm: str, now: datetime) -> float:
    """Seconds from `now` to the next HH:MM (24-hour clock, local time)."""
    match = re.fullmatch(r"([01]?\d|2[0-3]):([0-5]\d)", (hhmm or "").strip())
    if not match:
        raise UserError([Problem("--deadline", "must be a time of day HH:MM (24-hour clock)", "e.g. --deadline 23:30",
                                 hhmm)])
    due = now.replace(hour=int(match.group(1)), minute=int(match.group(2)), second=0, microsecond=0)
    if due <= now:
        due += timedelta(days=1)
    return (due - now).total_seconds()


def cost_seconds(usd: float, profile: Profile) -> float:
    """Seconds `usd` buys at the profile's hourly price (per machine: the price is per GPU, or per machine for a
    CPU profile, as the profile states it)."""
    price = profile.hardware.price_on_demand_per_hour or profile.hardware.price_spot_per_hour
    if not isinstance(usd, (int, float)) or isinstance(usd, bool) or not math.isfinite(usd) or usd <= 0:
        raise UserError([Problem("--max-cost", "must be a positive number of US dollars", "e.g. --max-cost 2.50", usd)])
    if not price:
        raise UserError([Problem("--max-cost", f"the profile {profile.name!r} has no hourly price",
                                 "set hardware.price_on_demand_per_hour (USD per hour) in it, or use --time-budget")])
    return usd / (price * max(1, profile.world_size)) * 3600.0


def budget_seconds(time_budget: float | None, deadline: str | None, max_cost: float | None, profile: Profile,
                   launched: datetime) -> tuple[float, str] | None:
    """The run's whole budget in seconds and where it came from, or None without one. At most one of the three."""
    given = [(f, v) for f, v in (("--time-budget", time_budget), ("--deadline", deadline), ("--max-cost", max_cost))
             if v is not None]
    if len(given) > 1:
        raise UserError([Problem(given[1][0], f"only one budget at a time: {given[0][0]} is given too",
                                 f"keep one of {', '.join(f for f, _ in given)}")])
    if time_budget is not None:
        return time_budget, "--time-budget"
    if deadline is not None:
        return deadline_seconds(deadline, launched), f"--deadline {deadline}"
    if max_cost is not None:
        return cost_seconds(max_cost, profile), f"--max-cost {max_cost:g} USD"
    return None
