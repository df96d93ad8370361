"""Rules that relate several fields of a profile.

They read the merged raw mapping (not a validated Profile) so they still run when some
unrelated field is invalid: `profiles validate` reports every problem of a file at once.
Each rule skips quietly when one of its inputs is itself invalid; that input has its own error.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from fasttrain.core import arithmetic as ar
from fasttrain.core.errors import Problems
from fasttrain.core.format import fmt_bytes, plural
from fasttrain.profiles.schema import SECTIONS, Profile

_DEFAULTS = Profile()
INVALID = object()  # a value the field's own schema refuses: it has its own error, rules skip it


def _get(data: Mapping[str, Any], dotted: str) -> Any:
    """The merged value as the schema reads it, the model default, or INVALID when the field's own rules
    (type, range, finite) refuse it, so no rule computes with .nan, 1e308 or a 4,000-digit int."""
    section, key = dotted.split(".")
    sec = data.get(section)
    if isinstance(sec, Mapping) and key in sec:
        try:
            return getattr(SECTIONS[section].model_validate({key: sec[key]}), key)
        except ValidationError:
            return INVALID
    return getattr(getattr(_DEFAULTS, section), key)


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


# Severity of an over-budget loader RAM in a what-if (`estimate`): shown and forecast, not refused.
HOST_RAM_WHAT_IF = "host-ram"


def check_cross_fields(data: Mapping[str, Any], problems: Problems, what_if: bool = False) -> None:
    """what_if: `estimate` forecasts the plan anyway, so an over-budget loader RAM is reported with its fix
    (severity HOST_RAM_WHAT_IF) instead of refused; train and validate keep refusing it."""
    _workers_and_prefetch(data, problems)
    _precision_and_hardware(data, problems)
    _loader_ram(data, problems, HOST_RAM_WHAT_IF if what_if else "error")


def _workers_and_prefetch(data: Mapping[str, Any], problems: Problems) -> None:
    """No worker processes: prefetch_factor and persistent_workers do not apply (the plan drops them and the
    DataLoader never gets them), so a preset's values are accepted with a note, e.g. --set loader.num_workers=0."""
    if _int(_get(data, "loader.num_workers")) != 0:
        return
    ignored = [key for key, unused in (("prefetch_factor", _get(data, "loader.prefetch_factor") not in (None, INVALID)),
                                       ("persistent_workers", _get(data, "loader.persistent_workers") is True))
               if unused]
    if ignored:
        problems.add("loader.num_workers=0", f"{' and '.join(ignored)} ignored: no worker processes",
                     severity="note")


def _supports_bf16(data: Mapping[str, Any]) -> bool | None:
    bf16 = _get(data, "hardware.bf16")
    if isinstance(bf16, bool):
        return bf16
    cc = _get(data, "hardware.compute_capability")
    if cc is INVALID:
        return None
    try:
        return float(cc) >= 8.0 if cc is not None else None
    except (TypeError, ValueError):
        return None


def _precision_and_hardware(data: Mapping[str, Any], problems: Problems) -> None:
    precision = _get(data, "speed.precision")
    gpu = _get(data, "hardware.gpu")
    if gpu is INVALID:
        return
    if precision == "bf16-mixed" and gpu is not None and _supports_bf16(data) is False:
        cc = _get(data, "hardware.compute_capability")
        problems.add("speed.precision", f"bf16 needs compute capability 8.0 or newer; {gpu} is {cc or 'older'}",
                     "use fp16-mixed (with its GradScaler) on this GPU", precision)
    if precision in ("fp16-mixed", "bf16-mixed") and gpu is None:
        problems.add("speed.precision", "mixed precision asked on a machine without a GPU",
                     "allowed: the plan falls back (bf16 autocast on CPU, fp16 to fp32) and says why",
                     precision, severity="note")


def _loader_ram(data: Mapping[str, Any], problems: Problems, severity: str = "error") -> None:
    workers = _int(_get(data, "loader.num_workers"))
    prefetch = _get(data, "loader.prefetch_factor")
    batch = _int(_get(data, "loader.batch_size"))
    size = _int(_get(data, "loader.image_size"))
    overhead = _num(_get(data, "loader.batch_overhead"))
    ram = _num(_get(data, "hardware.host_ram_gb"))
    fraction = _num(_get(data, "hardware.ram_budget_fraction"))
    per_node = _int(_get(data, "world.gpus_per_node"))
    if prefetch is not None and _int(prefetch) is None:
        return
    # `is None` one by one (not `None in (...)`), so the type checker knows each is set below
    if (workers is None or batch is None or size is None or overhead is None or ram is None or fraction is None
            or per_node is None or workers <= 0 or batch <= 0):
        return
    one = ar.batch_bytes(batch, size, overhead=overhead)
    used = ar.loader_ram_bytes(workers, prefetch, one, per_node)
    budget = ar.ram_budget_bytes(ram, fraction)
    pf = prefetch or 2
    procs = f" x {per_node} processes" if per_node > 1 else ""
    over = (f"loader RAM {plural(workers, 'worker')} x {pf} prefetch x {fmt_bytes(one)} per batch{procs} = "
            f"{fmt_bytes(used)}, over the budget {fmt_bytes(budget)} ({fraction:.0%} of {ram:g} GiB host RAM)")
    if per_node > 1:
        _shared_loader(data, problems, workers, pf, one, used, budget, over, per_node)
        return
    if used <= budget:
        return
    fit_workers = ar.workers_within_budget(workers, pf, one, budget, per_node)
    fit_prefetch = next((p for p in range(pf - 1, 0, -1)
                         if ar.loader_ram_bytes(workers, p, one, per_node) <= budget), 0)
    options = []
    if fit_workers:
        options.append(f"lower loader.num_workers to {fit_workers} or fewer")
    if fit_prefetch:
        options.append(f"loader.prefetch_factor to {fit_prefetch} or less")
    fix = " or ".join(options) if options else "lower loader.batch_size, num_workers and prefetch_factor"
    problems.add("loader.num_workers", f"{over}: the host runs out of memory", fix, workers, severity=severity)


def _shared_loader(data: Mapping[str, Any], problems: Problems, workers: int, pf: int, one: int, used: int,
                   budget: int, over: str, per_node: int) -> None:
    """Several processes on one machine: the plan caps workers per process by the cores and the loader RAM
    budget they share (plan._shared_workers), so a cap is a note; only what 0 workers cannot fix is an error."""
    cores = _int(_get(data, "hardware.cpu_cores"))
    if ar.loader_ram_bytes(0, None, one, per_node) > budget:
        problems.add("loader.batch_size", f"{over}: even with 0 workers the {per_node} processes' batches "
                     f"({fmt_bytes(one * per_node)}) do not fit", "lower loader.batch_size or world.gpus_per_node",
                     _get(data, "loader.batch_size"))
        return
    by_cores = workers if cores is None else min(workers, max(0, cores // per_node - 1))
    fitted = ar.workers_within_budget(by_cores, pf, one, budget, per_node)
    if fitted >= workers:
        return
    why = over if used > budget else f"{per_node} processes x {workers} workers on {cores} cores"
    problems.add("loader.num_workers", f"{why}: the plan runs {fitted} workers per process ({per_node} processes "
                 f"share {cores} cores and the {fmt_bytes(budget)} loader budget)",
                 f"allowed; set loader.num_workers={fitted} to say so", workers, severity="note")
