"""The precision a Plan settled on, for its whole life in a run: autocast, backward, the step, checkpoints.

The Plan decides the policy (fp16 on a CPU becomes fp32 there, with the reason); this module builds what a
precision name means on a device and runs it. It honours whatever it is given, so tests and benchmarks can
force fp16 autocast with a GradScaler on the CPU (torch supports both there).

Non-finite guard: without fp16's GradScaler, a "guard" GradScaler fixed at scale 1.0 does the same job: it
checks the gradients for inf/NaN and skips that optimizer step, so one bad batch cannot poison the weights.
Multiplying by 1.0 is exact, so the weights are bit-identical to an unguarded run. It costs one pass over the
gradients; a fused (CUDA) optimizer takes the check on the device without a sync. On a CPU the gradient norm
does the guard's job instead (see optimizer_step).
Imported only by the trainer, never by cli.py: it imports torch at the top.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import torch

from fasttrain.core.errors import JobFailed

# Consecutive non-finite steps that --on-nan stop tolerates before it stops the run (fp16 overflows come
# alone or in pairs while the GradScaler backs off; three in a row means the run itself went bad).
MAX_NONFINITE_STREAK = 3
ON_NAN_MODES = ("stop", "skip")
_DTYPES = {"fp16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}
_get_total_norm = getattr(torch.nn.utils, "get_total_norm", None)


class Precision:
    """One precision name on one device: an autocast dtype (or none), fp16's GradScaler (or none), and the
    guard GradScaler that skips non-finite steps when there is no fp16 scaler."""

    def __init__(self, name: str, device_type: str, dtype: torch.dtype | None, scaler: torch.amp.GradScaler | None,
                 *, guard: bool = True):
        self.name = name                  # "fp32" | "fp16-mixed" | "bf16-mixed"
        self.device_type = device_type    # "cuda" | "cpu"
        self.dtype = dtype                # autocast dtype; None = plain fp32
        self.scaler = scaler              # fp16's loss scaler; None for bf16 and fp32
        # guard=False: plain steps (`bench speedups` times each setting against a plain loop, not the guard's cost)
        self.guard = _guard_scaler(device_type) if scaler is None and guard else None
        # After a guarded optimizer_step: a device tensor, > 0 when its gradients were not finite (step skipped).
        self.guard_found_inf: torch.Tensor | None = None

    @property
    def checker(self) -> torch.amp.GradScaler | None:
        """The GradScaler that checks (and for fp16 scales) gradients: fp16's own, else the guard."""
        return self.scaler if self.scaler is not None else self.guard

    @property
    def _host_guard(self) -> bool:
        # On a CPU the guard's job is done by the gradient norm: a read-only pass and a cheap host read, where the
        # GradScaler machinery cost ~0.4 ms of Python per step (benchmarks/loop_overhead.py). On CUDA the guard
        # GradScaler stays: with a fused optimizer it skips on the device without a sync.
        return self.scaler is None and self.guard is not None and self.device_type == "cpu"

    def use(self, name: str) -> None:
        """Switch between bf16 autocast and fp32 between two steps (the precision A/B, train/trial/precision_ab.py).
        Neither has a loss scaler or any state, so the switch is exact; fp16 (its GradScaler) is never switched."""
        if self.scaler is not None or name not in ("bf16-mixed", "fp32"):
            raise ValueError(f"cannot switch {self.name} to {name} between steps")
        self.name, self.dtype = name, _DTYPES.get(name)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device_type, dtype=self.dtype)

    @property
    def scale(self) -> float | None:
        """Current fp16 loss scale; reading it syncs a CUDA device, so call it only on logged steps."""
        return float(self.scaler.get_scale()) if self.scaler is not None else None

    def scale_snapshot(self) -> torch.Tensor | None:
        """The fp16 loss scale now, as a device tensor (no sync: the logged step reads it later). GradScaler's only
        public reader, get_scale(), returns a float and so syncs; _get_scale_async() is the tensor it reads,
        private but stable since torch 1.6. A copy, since update() changes the scale in place."""
        if self.scaler is None:
            return None
        scale = self.scaler._get_scale_async()
        return scale.detach().clone() if scale is not None else None

    def backward(self, loss: torch.Tensor) -> None:
        """Backward through the checker's scale (fp16: the loss scale; the guard: exactly 1.0)."""
        checker = self.checker
        if checker is not None:
            checker.scale(loss).backward()
        else:
            loss.backward()

    def unscale_(self, optimizer: torch.optim.Optimizer) -> None:
        """Before clipping or measuring the gradients: they must be the true ones, not scaled."""
        if self.checker is not None and not self._host_guard:
            self.checker.unscale_(optimizer)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, params: list[torch.Tensor],
                       norm: torch.Tensor | None) -> None:
        """Step unless the gradients hold inf/NaN (then the step is skipped; fp16 also lowers its scale).
        `norm`: the total gradient norm when the caller has it (clipping), else computed here if needed."""
        checker = self.checker
        if self._host_guard:
            checked = norm if norm is not None else total_norm(params)
            self.guard_found_inf = (~torch.isfinite(checked)).float()
            if not bool(self.guard_found_inf):  # a non-finite norm means some gradient is inf/NaN: skip
                optimizer.step()
        elif checker is not None:
            checker.step(optimizer)   # skips the step when the gradients hold inf/NaN
            if checker is self.guard:
                self.guard_found_inf = _found_inf(checker, optimizer)
            checker.update(1.0 if checker is self.guard else None)  # the guard never scales
        else:
            optimizer.step()

    def state_dict(self) -> dict[str, Any] | None:
        """The fp16 loss scaler's state (None without one); the guard has none worth keeping (always 1.0)."""
        return self.scaler.state_dict() if self.scaler is not None else None

    def load_state_dict(self, state: dict[str, Any] | None) -> None:
        if self.scaler is not None and state:
            self.scaler.load_state_dict(state)


def make_precision(name: str, device: str | torch.device, *, init_scale: float = 2.0**16,
                   guard: bool = True) -> Precision:
    """fp16 -> autocast fp16 + GradScaler (small gradients would underflow fp16 without it);
    bf16 -> autocast bf16, no scaler (bf16 has fp32's exponent range); fp32 -> neither.
    guard=False: no non-finite guard for bf16/fp32 (plain optimizer steps)."""
    device_type = torch.device(device).type
    if name == "fp32":
        return Precision(name, device_type, None, None, guard=guard)
    if name not in _DTYPES:
        raise ValueError(f"unknown precision {name!r}; expected fp32, fp16-mixed or bf16-mixed")
    scaler = torch.amp.GradScaler(device_type, init_scale=init_scale) if name == "fp16-mixed" else None
    return Precision(name, device_type, _DTYPES[name], scaler, guard=guard)


def total_norm(params: list[torch.Tensor]) -> torch.Tensor:
    """The 2-norm of all gradients together (a device tensor; no sync)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    if _get_total_norm is not None:
        return _get_total_norm(grads)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


def _guard_scaler(device_type: str) -> Any:
    try:  # growth never happens in practice (interval 2**30) and update(1.0) resets any back-off
        return torch.amp.GradScaler(device_type, init_scale=1.0, growth_interval=2**30)
    except (RuntimeError, ValueError, AssertionError):
        return None  # a device without GradScaler support: steps are unguarded


def _found_inf(scaler: Any, optimizer: torch.optim.Optimizer) -> torch.Tensor | None:
    # GradScaler has no public "was this step skipped" answer that stays on the device; _found_inf_per_device is
    # private but stable since torch 1.6, and only informs the non-finite streak.
    try:
        found = scaler._found_inf_per_device(optimizer)
    except (AttributeError, KeyError, RuntimeError, AssertionError):
        return None
    values = list(found.values())
    return sum(values[1:], values[0]) if values else None


@dataclass
class NonFiniteGuard:
    """Counts consecutive non-finite steps on the device (no sync per step); read at check points."""

    device: torch.device
    streak: torch.Tensor = field(init=False)
    worst: torch.Tensor = field(init=False)

    def __post_init__(self) -> None:
        self.streak = torch.zeros((), dtype=torch.long, device=self.device)
        self.worst = torch.zeros((), dtype=torch.long, device=self.device)

    def record(self, bad: torch.Tensor) -> None:
        self.streak = (self.streak + 1) * bad.long()
        self.worst = torch.maximum(self.worst, self.streak)

    def read_and_reset(self) -> int:
        worst = int(self.worst)
        self.worst = self.streak.clone()
        return worst

    def check(self, stop: bool, step: int, epoch: int, index: int, lr: float, last_good: object) -> None:
        """Read the worst streak since the last check (a sync on a GPU); with `stop` (--on-nan stop), raise
        JobFailed once it reaches MAX_NONFINITE_STREAK. step/epoch/index (0-based)/lr: where, for the message."""
        worst = self.read_and_reset()
        if not stop or worst < MAX_NONFINITE_STREAK:
            return
        good = str(last_good) if last_good is not None else "none written yet"
        raise JobFailed(f"{worst} steps in a row had a non-finite loss or gradients, the last at optimizer step "
                        f"{step} (epoch {epoch + 1}, batch {index + 1}, LR {lr:.4g}); their updates "
                        f"were skipped and nothing was saved after them. Last good checkpoint: {good} (intact). "
                        "Lower optim.base_lr, set optim.clip_grad_norm, or use --on-nan skip")
