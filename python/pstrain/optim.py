"""torch.optim optimizers and lr_scheduler schedulers as pstrain settings.

The ps runs the optimizer; a training script names one in torch's terms.
`optimizer_config` turns a torch.optim optimizer (and a scheduler, if any)
into the job's optimizer settings: a dict in the form of the
OptimizerConfig message (proto/pstrain.proto), with form "torch", so that
the ps applies torch's own update rule. `pstrain.torch.export_spec` writes
it into the model spec, where the chief takes it as the job's optimizer.

Schedulers are stepped per epoch in most scripts: give `steps_per_epoch`
(the optimizer steps between two scheduler.step() calls; 1 for a script
that steps its scheduler every batch) and the schedule counts in those
units (`every`), so the ps's rate at each update is the one torch's would
have been.

What cannot be mapped exactly is refused with a ValueError naming it: an
optimizer torch has that the ps does not (Adamax, NAdam, LBFGS, a custom
one), an option of one (amsgrad, maximize, dampening), a scheduler whose
rate is not a function of the step alone (LambdaLR, ReduceLROnPlateau,
OneCycleLR, ...), or param groups whose settings differ.
"""

import math
from typing import Dict, List, Optional, Tuple

import torch

__all__ = ["clip_by_global_norm", "optimizer_config", "optimizer_groups", "schedule_config"]


def clip_by_global_norm(grads, max_norm: float) -> torch.Tensor:
    """Scales `grads` (tensors, in place) by max_norm / (norm + 1e-6) when
    their global L2 norm is above max_norm, exactly as
    torch.nn.utils.clip_grad_norm_ (PyTorch 1.13) does for parameters with
    these gradients. Returns the norm before clipping. The Trainer calls it
    with a step's dense gradients and each table's row gradients (summed by
    id: the rows the table's dense gradient would have)."""
    grads = [g for g in grads if g is not None]
    if not grads:
        return torch.tensor(0.)
    total_norm = torch.norm(torch.stack([torch.norm(g.detach(), 2.0) for g in grads]), 2.0)
    clip_coef = float(max_norm) / (total_norm + 1e-6)
    clip_coef_clamped = torch.clamp(clip_coef, max=1.0)
    for g in grads:
        g.detach().mul_(clip_coef_clamped)
    return total_norm


def _refuse(what: str) -> None:
    raise ValueError(f"pstrain cannot run {what} on the ps (docs/optimizers.md lists what it can)")


def _settings(group: dict, optimizer: torch.optim.Optimizer) -> Dict:
    """The OptimizerConfig fields of one param group."""
    kind = type(optimizer).__name__
    lr = group.get("initial_lr", group["lr"])
    if group.get("maximize", False):
        _refuse(f"{kind}(maximize=True)")
    out = {"form": "torch", "learning_rate": float(lr)}
    decay = float(group.get("weight_decay", 0.0))
    if decay:
        out["weight_decay"] = decay
    if isinstance(optimizer, torch.optim.SGD):
        if group["dampening"]:
            _refuse(f"SGD(dampening={group['dampening']})")
        if group["momentum"]:
            out.update(name="momentum", momentum=float(group["momentum"]),
                       nesterov=bool(group["nesterov"]))
        else:
            out["name"] = "sgd"
    elif isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        if group.get("amsgrad", False):
            _refuse(f"{kind}(amsgrad=True)")
        beta1, beta2 = group["betas"]
        out.update(name="adamw" if isinstance(optimizer, torch.optim.AdamW) else "adam",
                   beta1=float(beta1), beta2=float(beta2), epsilon=float(group["eps"]))
    elif isinstance(optimizer, torch.optim.Adagrad):
        out.update(name="adagrad", epsilon=float(group["eps"]),
                   initial_accumulator=float(group["initial_accumulator_value"]))
        if group["lr_decay"]:
            out["lr_decay"] = float(group["lr_decay"])
    elif isinstance(optimizer, torch.optim.RMSprop):
        if not group["alpha"] > 0:
            _refuse(f"RMSprop(alpha={group['alpha']})")
        out.update(name="rmsprop", rho=float(group["alpha"]), epsilon=float(group["eps"]),
                   momentum=float(group["momentum"]), centered=bool(group["centered"]))
    elif isinstance(optimizer, torch.optim.Adadelta):
        if not group["rho"] > 0:
            _refuse(f"Adadelta(rho={group['rho']})")
        out.update(name="adadelta", rho=float(group["rho"]), epsilon=float(group["eps"]))
    else:
        _refuse(f"torch.optim.{kind}" if type(optimizer).__module__.startswith("torch.optim")
                else f"the optimizer {type(optimizer).__module__}.{kind}")
    return out


def _fresh(scheduler, what: str) -> None:
    if scheduler.last_epoch != 0:
        raise ValueError(f"{what} has stepped {scheduler.last_epoch} time(s) already: map a "
                         f"scheduler before training with it")


def _kind(scheduler, base_lr: float) -> Dict:
    """The schedule fields of one scheduler (no warm-up)."""
    name = type(scheduler).__name__
    S = torch.optim.lr_scheduler
    if isinstance(scheduler, S.StepLR):
        return {"kind": "step", "step_size": scheduler.step_size, "gamma": scheduler.gamma}
    if isinstance(scheduler, S.MultiStepLR):
        milestones = sorted(scheduler.milestones.elements())
        return {"kind": "multistep", "milestones": milestones, "gamma": scheduler.gamma}
    if isinstance(scheduler, S.ExponentialLR):
        return {"kind": "exponential", "gamma": scheduler.gamma}
    if isinstance(scheduler, S.CosineAnnealingLR):
        # torch's rate rises again after T_max; the ps's stays at eta_min.
        return {"kind": "cosine", "decay_units": scheduler.T_max, "min_lr": scheduler.eta_min}
    if hasattr(S, "PolynomialLR") and isinstance(scheduler, S.PolynomialLR):
        return {"kind": "polynomial", "decay_units": scheduler.total_iters,
                "power": scheduler.power}
    if isinstance(scheduler, S.ConstantLR):
        if scheduler.total_iters < 1:
            return {"kind": "constant"}
        return {"kind": "piecewise", "boundaries": [scheduler.total_iters - 1],
                "values": [base_lr * scheduler.factor, base_lr]}
    if isinstance(scheduler, S.LinearLR):
        warmup = _warmup(scheduler)
        warmup["kind"] = "constant"
        return warmup
    _refuse(f"the scheduler {name} (its rate is not a function of the step pstrain knows)")


def _warmup(scheduler) -> Dict:
    if scheduler.end_factor != 1.0:
        _refuse(f"LinearLR(end_factor={scheduler.end_factor}) (a warm-up ends at the base rate)")
    return {"warmup": scheduler.total_iters, "warmup_start": scheduler.start_factor}


def schedule_config(scheduler, base_lr: float, steps_per_epoch: int = 1) -> Dict:
    """The LrSchedule fields (a dict) of a torch.optim.lr_scheduler
    scheduler stepped every `steps_per_epoch` optimizer steps."""
    if int(steps_per_epoch) != steps_per_epoch or steps_per_epoch < 1:
        raise ValueError(f"steps_per_epoch must be a whole number >= 1, got {steps_per_epoch}")
    _fresh(scheduler, type(scheduler).__name__)
    S = torch.optim.lr_scheduler
    if isinstance(scheduler, S.SequentialLR):
        parts = scheduler._schedulers
        milestones = list(scheduler._milestones)
        if len(parts) != 2 or not isinstance(parts[0], S.LinearLR):
            _refuse("SequentialLR but as a LinearLR warm-up followed by one scheduler")
        warmup = _warmup(parts[0])
        if milestones != [warmup["warmup"]]:
            _refuse(f"SequentialLR with milestones {milestones} (the warm-up's LinearLR has "
                    f"total_iters {warmup['warmup']}: they must agree)")
        out = _kind(parts[1], base_lr)
        out.update(warmup)
    else:
        out = _kind(scheduler, base_lr)
    if steps_per_epoch > 1:
        out["every"] = int(steps_per_epoch)
    return {k: v for k, v in out.items() if not (isinstance(v, (int, float)) and v == 0
                                                  and k != "kind")}


def _group_config(group: dict, optimizer, scheduler, steps_per_epoch) -> Dict:
    out = _settings(group, optimizer)
    if scheduler is not None:
        schedule = schedule_config(scheduler, out["learning_rate"], steps_per_epoch)
        if schedule.get("kind", "constant") != "constant" or schedule.get("warmup"):
            out["schedule"] = schedule
    for key, value in out.items():
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{type(optimizer).__name__} {key} is {value}")
    return out


def _check_scheduler(optimizer, scheduler) -> None:
    if scheduler is not None and scheduler.optimizer is not optimizer:
        raise ValueError("the scheduler schedules another optimizer")


def optimizer_config(optimizer: torch.optim.Optimizer, scheduler=None,
                     steps_per_epoch: int = 1) -> Dict:
    """The job's optimizer settings (an OptimizerConfig as a dict) that make
    the ps apply `optimizer`'s update rule, with `scheduler`'s rates. Its
    param groups must agree (optimizer_groups maps ones that differ).

    Raises ValueError naming what cannot be mapped."""
    _check_scheduler(optimizer, scheduler)
    groups = [_group_config(g, optimizer, scheduler, steps_per_epoch)
              for g in optimizer.param_groups]
    if any(g != groups[0] for g in groups[1:]):
        raise ValueError(f"{type(optimizer).__name__} has param groups with different settings "
                         f"({groups[0]} and {next(g for g in groups if g != groups[0])}): "
                         f"map them with optimizer_groups(module, ...)")
    return groups[0]


def optimizer_groups(module: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler=None,
                     steps_per_epoch: int = 1) -> Tuple[Dict, List[Dict]]:
    """The job's optimizer and its groups, for an optimizer whose param
    groups differ (torch's per-group settings): (the first param group's
    settings, [{"match": [names], "optimizer": settings}] for the other
    groups, each naming its parameters by their names in `module`). The
    groups go into the spec's "optimizer_groups". ValueError for a
    parameter that is not the module's, or what optimizer_config refuses."""
    _check_scheduler(optimizer, scheduler)
    names = {id(p): n for n, p in module.named_parameters()}
    configs = [_group_config(g, optimizer, scheduler, steps_per_epoch)
               for g in optimizer.param_groups]
    groups = []
    for group, config in zip(optimizer.param_groups[1:], configs[1:]):
        if config == configs[0]:
            continue
        match = []
        for p in group["params"]:
            if id(p) not in names:
                raise ValueError(f"{type(optimizer).__name__} trains a parameter of shape "
                                 f"{list(p.shape)} that is not the module's")
            match.append(names[id(p)])
        groups.append({"match": match, "optimizer": config})
    return configs[0], groups
