"""The ps's optimizers against their references, over 200 steps.

Each case is a torch.optim optimizer (and scheduler), mapped to the job's
settings by pstrain.optim. The same seeded, varying gradient sequence goes
through the ps's store (`optimizer_replay`: the pushes a ps applies, dense
or as row pushes to a table, with a checkpoint restore in the middle where
asked) and through torch itself; the values must agree within 1e-6,
relative to the largest value. TensorFlow's forms are checked against
their published update rules, written here in numpy.
"""

import json
import os
import subprocess

import numpy as np
import pytest
import torch

from pstrain import optim

from conftest import BIN

# SequentialLR steps its parts with an epoch argument, which torch warns of.
pytestmark = pytest.mark.filterwarnings("ignore:The epoch parameter")

ROWS, DIM, STEPS = 16, 8, 200
TOLERANCE = 1e-6


def gradients(seed, steps, rows):
    """A varying sequence: scales that drift over orders of magnitude, signs
    that flip, an occasional spike, and some exact zeros."""
    rng = np.random.default_rng(seed)
    g = rng.standard_normal((steps, rows, DIM)).astype(np.float32)
    scale = np.exp(np.sin(np.arange(steps) / 17.0) * 2.0).astype(np.float32)
    g *= scale[:, None, None]
    g[rng.random((steps, rows, DIM)) < 0.05] = 0.0
    g[::37] *= 20.0
    return g


def initial_values(seed):
    return np.random.default_rng(seed + 1).uniform(-1, 1, (ROWS, DIM)).astype(np.float32)


def replay(config, init, grads, tmp_path, ids=None, restore_at=0):
    """The values the ps's store ends with after pushing `grads`."""
    files = {"init": init, "grads": grads}
    if ids is not None:
        files["ids"] = ids.astype(np.int64)
    spec = {"optimizer": config, "rows": ROWS, "dim": DIM, "steps": len(grads),
            "table": ids is not None, "ids_per_step": 0 if ids is None else ids.shape[1],
            "restore_at": restore_at, "out": str(tmp_path / "out.f32")}
    for name, array in files.items():
        path = tmp_path / f"{name}.bin"
        np.ascontiguousarray(array).tofile(path)
        spec[name] = str(path)
    (tmp_path / "replay.json").write_text(json.dumps(spec))
    run = subprocess.run([os.path.join(BIN, "optimizer_replay"), str(tmp_path / "replay.json")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return np.fromfile(tmp_path / "out.f32", dtype=np.float32).reshape(ROWS, DIM)


def assert_close(got, want, what):
    scale = float(np.max(np.abs(want)))
    err = float(np.max(np.abs(got - want)))
    assert err <= TOLERANCE * scale, f"{what}: max error {err:.3g} on values up to {scale:.3g}"


# Each case: an optimizer class and its arguments, a scheduler (a function
# of the optimizer) and the steps per epoch it is stepped at.
CASES = {
    "sgd": (torch.optim.SGD, dict(lr=0.05), None, 1),
    "sgd_momentum_decay": (torch.optim.SGD, dict(lr=0.01, momentum=0.9, weight_decay=0.01),
                           None, 1),
    "sgd_nesterov": (torch.optim.SGD, dict(lr=0.01, momentum=0.8, nesterov=True), None, 1),
    "adam": (torch.optim.Adam, dict(lr=0.01, weight_decay=0.01), None, 1),
    "adamw": (torch.optim.AdamW, dict(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1), None, 1),
    "adagrad": (torch.optim.Adagrad,
                dict(lr=0.1, lr_decay=0.01, initial_accumulator_value=0.1, weight_decay=0.001),
                None, 1),
    "rmsprop": (torch.optim.RMSprop, dict(lr=0.01), None, 1),
    "rmsprop_centered_momentum": (torch.optim.RMSprop,
                                  dict(lr=0.001, alpha=0.9, momentum=0.9, centered=True,
                                       weight_decay=0.01), None, 1),
    "adadelta": (torch.optim.Adadelta, dict(lr=1.0), None, 1),
    "adadelta_decay": (torch.optim.Adadelta, dict(lr=0.5, rho=0.95, weight_decay=0.01), None, 1),
    # Schedules, each stepped per epoch of `spe` steps.
    "adadelta_steplr": (torch.optim.Adadelta, dict(lr=1.0),
                        lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=1, gamma=0.7), 20),
    "momentum_multistep": (torch.optim.SGD, dict(lr=0.05, momentum=0.9),
                           lambda o: torch.optim.lr_scheduler.MultiStepLR(o, [2, 5, 5], 0.5), 25),
    "adam_exponential": (torch.optim.Adam, dict(lr=0.01),
                         lambda o: torch.optim.lr_scheduler.ExponentialLR(o, 0.9), 10),
    "adamw_cosine": (torch.optim.AdamW, dict(lr=0.01),
                     lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 10, eta_min=1e-4),
                     20),
    "rmsprop_polynomial": (torch.optim.RMSprop, dict(lr=0.01),
                           lambda o: torch.optim.lr_scheduler.PolynomialLR(o, 8, power=2.0), 20),
    "sgd_constant_factor": (torch.optim.SGD, dict(lr=0.05),
                            lambda o: torch.optim.lr_scheduler.ConstantLR(o, 0.25, 3), 10),
    "adagrad_warmup_cosine": (
        torch.optim.Adagrad, dict(lr=0.1),
        lambda o: torch.optim.lr_scheduler.SequentialLR(
            o, [torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=4),
                torch.optim.lr_scheduler.CosineAnnealingLR(o, 40)], milestones=[4]), 5),
}


def torch_dense(case, init, grads, clip_value=0):
    cls, kwargs, make_scheduler, spe = CASES[case]
    p = torch.nn.Parameter(torch.from_numpy(init.copy()))
    opt = cls([p], **kwargs)
    scheduler = make_scheduler(opt) if make_scheduler else None
    for s, g in enumerate(grads):
        p.grad = torch.from_numpy(g.copy())
        if clip_value:
            torch.nn.utils.clip_grad_value_([p], clip_value)
        opt.step()
        if scheduler is not None and (s + 1) % spe == 0:
            scheduler.step()
    return p.detach().numpy()


def config_of(case):
    cls, kwargs, make_scheduler, spe = CASES[case]
    p = torch.nn.Parameter(torch.zeros(1))
    opt = cls([p], **kwargs)
    scheduler = make_scheduler(opt) if make_scheduler else None
    return optim.optimizer_config(opt, scheduler, steps_per_epoch=spe)


@pytest.mark.parametrize("case", sorted(CASES))
def test_dense_updates_match_torch(case, tmp_path):
    init, grads = initial_values(3), gradients(3, STEPS, ROWS)
    got = replay(config_of(case), init, grads, tmp_path)
    assert_close(got, torch_dense(case, init, grads), case)


@pytest.mark.parametrize("case", ["adam", "adadelta_steplr", "rmsprop_centered_momentum",
                                  "adagrad_warmup_cosine"])
def test_dense_updates_match_torch_across_a_restore(case, tmp_path):
    init, grads = initial_values(4), gradients(4, STEPS, ROWS)
    got = replay(config_of(case), init, grads, tmp_path, restore_at=STEPS // 2)
    assert_close(got, torch_dense(case, init, grads), case)


def test_clip_value_matches_torch_clip_grad_value(tmp_path):
    init, grads = initial_values(5), gradients(5, STEPS, ROWS)
    config = dict(config_of("adadelta"), clip_value=0.5)
    got = replay(config, init, grads, tmp_path)
    assert_close(got, torch_dense("adadelta", init, grads, clip_value=0.5), "clip_value")
    # The clip did something: unclipped, the values differ.
    assert np.max(np.abs(got - torch_dense("adadelta", init, grads))) > 1e-3


# Lazy row updates: the rows a push names change, with the variable's step
# count; the others and their slots stay as they are (torch's sparse
# Adagrad and SparseAdam, TensorFlow's sparse apply ops). The reference
# applies torch's optimizer to the pushed rows alone, their slots gathered
# from the whole table's and scattered back.
_STEP_AS_TENSOR = (torch.optim.Adam, torch.optim.AdamW, torch.optim.Adagrad)


def torch_lazy_rows(case, init, ids, grads):
    cls, kwargs, make_scheduler, spe = CASES[case]
    table = torch.from_numpy(init.copy())
    state = {}
    # The rate of each step, from the real scheduler on a stand-in.
    stand_in = cls([torch.nn.Parameter(torch.zeros(1))], **kwargs)
    scheduler = make_scheduler(stand_in) if make_scheduler else None
    for s in range(len(grads)):
        lr = stand_in.param_groups[0]["lr"]
        rows = torch.from_numpy(ids[s])
        sub = torch.nn.Parameter(table[rows].clone())
        opt = cls([sub], **dict(kwargs, lr=lr))
        if state:
            opt.state[sub] = {k: (v[rows].clone() if torch.is_tensor(v) else v)
                              for k, v in state.items()}
            opt.state[sub]["step"] = (torch.tensor(float(s)) if cls in _STEP_AS_TENSOR else s)
        sub.grad = torch.from_numpy(grads[s].copy())
        opt.step()
        for k, v in opt.state[sub].items():
            if k == "step" or v is None:
                continue
            if k not in state:
                start = kwargs.get("initial_accumulator_value", 0.0) if k == "sum" else 0.0
                state[k] = torch.full_like(table, start)
            state[k][rows] = v
        table[rows] = sub.detach()
        if scheduler is not None and (s + 1) % spe == 0:
            scheduler.step()
    return table.numpy()


@pytest.mark.parametrize("case", ["sgd_momentum_decay", "adam", "adagrad", "rmsprop",
                                  "adadelta_steplr", "adamw_cosine"])
@pytest.mark.parametrize("restore_at", [0, STEPS // 2])
def test_row_updates_are_lazy_and_match_torch(case, restore_at, tmp_path):
    rng = np.random.default_rng(6)
    ids = np.stack([rng.choice(ROWS, 5, replace=False) for _ in range(STEPS)])
    grads = gradients(6, STEPS, 5)
    init = initial_values(6)
    got = replay(config_of(case), init, grads, tmp_path, ids=ids, restore_at=restore_at)
    assert_close(got, torch_lazy_rows(case, init, ids, grads), case)


# TensorFlow's forms, from the update rules its kernels document
# (training_ops: ApplyAdam, ApplyAdagrad, ApplyRMSProp, ApplyCenteredRMSProp,
# ApplyAdadelta; Keras's AdamW), in float64.
def tf_reference(config, init, grads):
    p = init.astype(np.float64)
    name, lr = config["name"], config["learning_rate"]
    s1, s2, s3 = np.zeros_like(p), np.zeros_like(p), np.zeros_like(p)
    if name == "adagrad":
        s1 += config.get("initial_accumulator", 0.1)
    for t, g in enumerate(grads.astype(np.float64), start=1):
        if name in ("adam", "adamw"):
            b1, b2, eps = config["beta1"], config["beta2"], config.get("epsilon", 1e-7)
            if name == "adamw":
                p -= p * config["weight_decay"] * lr
            s1 = b1 * s1 + (1 - b1) * g
            s2 = b2 * s2 + (1 - b2) * g * g
            p -= lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * s1 / (np.sqrt(s2) + eps)
        elif name == "adagrad":
            s1 += g * g
            p -= lr * g / np.sqrt(s1)
        elif name == "rmsprop":
            rho, eps, m = config.get("rho", 0.9), config.get("epsilon", 1e-7), config["momentum"]
            s1 += (g * g - s1) * (1 - rho)
            denom = s1 + eps
            if config.get("centered"):
                s3 += (g - s3) * (1 - rho)
                denom = s1 - s3 * s3 + eps
            s2 = s2 * m + lr * g / np.sqrt(denom)
            p -= s2
        elif name == "adadelta":
            rho, eps = config.get("rho", 0.9), config.get("epsilon", 1e-7)
            s1 = s1 * rho + g * g * (1 - rho)
            update = np.sqrt(s2 + eps) / np.sqrt(s1 + eps) * g
            p -= update * lr
            s2 = s2 * rho + update * update * (1 - rho)
    return p


TF_CASES = {
    "adam": dict(name="adam", learning_rate=0.01, beta1=0.9, beta2=0.999),
    "adamw": dict(name="adamw", learning_rate=0.01, beta1=0.9, beta2=0.99, weight_decay=0.05),
    "adagrad": dict(name="adagrad", learning_rate=0.1),
    "rmsprop": dict(name="rmsprop", learning_rate=0.001, momentum=0.0),
    "rmsprop_centered_momentum": dict(name="rmsprop", learning_rate=0.001, momentum=0.9,
                                      centered=True),
    "adadelta": dict(name="adadelta", learning_rate=1.0),
}


@pytest.mark.parametrize("case", sorted(TF_CASES))
def test_tensorflow_forms_match_their_update_rules(case, tmp_path):
    init, grads = initial_values(7), gradients(7, STEPS, ROWS)
    config = TF_CASES[case]
    got = replay(config, init, grads, tmp_path)
    # float32 against float64: the rounding of 200 steps, not a rule apart.
    want = tf_reference(config, init, grads)
    err = float(np.max(np.abs(got - want)))
    assert err <= 2e-5 * float(np.max(np.abs(want))), f"{case}: max error {err:.3g}"


def test_tensorflow_and_torch_forms_differ_where_their_rules_do(tmp_path):
    """Adam's epsilon sits outside the bias correction in TF's form, inside
    in torch's: with a large epsilon the two end apart."""
    init, grads = initial_values(8), gradients(8, 50, ROWS) * 1e-3
    base = dict(name="adam", learning_rate=0.01, beta1=0.9, beta2=0.999, epsilon=1e-3)
    tf = replay(dict(base, form="tensorflow"), init, grads, tmp_path)
    th = replay(dict(base, form="torch"), init, grads, tmp_path)
    assert np.max(np.abs(tf - th)) > 1e-4


def test_clip_by_global_norm_scales_a_spiked_gradient_as_torch_does():
    rng = np.random.default_rng(9)
    grads = [rng.standard_normal(s).astype(np.float32) for s in ((16, 8), (8,), (5, 4))]
    grads[0][3, 2] = 500.0  # the spike
    params = [torch.nn.Parameter(torch.zeros(g.shape)) for g in grads]
    for p, g in zip(params, grads):
        p.grad = torch.from_numpy(g.copy())
    want_norm = torch.nn.utils.clip_grad_norm_(params, 2.0)
    ours = [torch.from_numpy(g.copy()) for g in grads]
    norm = optim.clip_by_global_norm(ours, 2.0)
    assert float(norm) == float(want_norm) > 500
    for got, p in zip(ours, params):
        assert torch.equal(got, p.grad)
    total = float(torch.norm(torch.stack([torch.norm(g) for g in ours])))
    assert abs(total - 2.0) < 1e-5
    # Within the norm: left as it is.
    small = [torch.full((3,), 0.1)]
    optim.clip_by_global_norm(small, 2.0)
    assert torch.equal(small[0], torch.full((3,), 0.1))


def test_param_groups_with_settings_of_their_own_become_groups_by_parameter_name():
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    opt = torch.optim.Adam([{"params": model[0].parameters()},
                            {"params": model[1].parameters(), "lr": 0.1, "weight_decay": 0.01}],
                           lr=0.001)
    sched = torch.optim.lr_scheduler.StepLR(opt, 2, gamma=0.5)
    default, groups = optim.optimizer_groups(model, opt, sched, steps_per_epoch=10)
    assert default["name"] == "adam" and default["learning_rate"] == 0.001
    assert default["schedule"] == {"kind": "step", "step_size": 2, "gamma": 0.5, "every": 10}
    assert groups == [{"match": ["1.weight", "1.bias"],
                       "optimizer": dict(default, learning_rate=0.1, weight_decay=0.01)}]
    with pytest.raises(ValueError, match="map them with optimizer_groups"):
        optim.optimizer_config(opt, sched, steps_per_epoch=10)
    # Groups that agree are one optimizer.
    same = torch.optim.SGD([{"params": model[0].parameters()},
                            {"params": model[1].parameters()}], lr=0.1)
    assert optim.optimizer_groups(model, same)[1] == []


class Custom(torch.optim.Optimizer):
    def __init__(self, params):
        super().__init__(params, {"lr": 0.1})


@pytest.mark.parametrize("make, says", [
    (lambda p: (Custom(p), None), "the optimizer test_optimizers.Custom"),
    (lambda p: (torch.optim.Adamax(p), None), "torch.optim.Adamax"),
    (lambda p: (torch.optim.Adam(p, amsgrad=True), None), r"Adam\(amsgrad=True\)"),
    (lambda p: (torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1), None),
     r"SGD\(dampening=0.1\)"),
    (lambda p: (lambda o: (o, torch.optim.lr_scheduler.LambdaLR(o, lambda e: 0.9 ** e)))(
        torch.optim.SGD(p, lr=0.1)), "the scheduler LambdaLR"),
    (lambda p: (lambda o: (o, torch.optim.lr_scheduler.OneCycleLR(o, 0.1, total_steps=10)))(
        torch.optim.SGD(p, lr=0.1)), "the scheduler OneCycleLR"),
    (lambda p: (lambda o: (o, torch.optim.lr_scheduler.LinearLR(o, 0.5, end_factor=0.8)))(
        torch.optim.SGD(p, lr=0.1)), r"LinearLR\(end_factor=0.8\)"),
])
def test_what_cannot_be_mapped_is_refused_naming_it(make, says):
    optimizer, scheduler = make([torch.nn.Parameter(torch.zeros(3))])
    with pytest.raises(ValueError, match=says):
        optim.optimizer_config(optimizer, scheduler)


def test_a_scheduler_that_has_stepped_is_refused():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(3))], lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1)
    opt.step()
    sched.step()
    with pytest.raises(ValueError, match="has stepped 1 time"):
        optim.optimizer_config(opt, sched)


@pytest.mark.parametrize("config", [
    dict(name="sgd", learning_rate=0.05),
    dict(name="adagrad", learning_rate=0.1, initial_accumulator=0.1),
    dict(name="ftrl", learning_rate=0.1, initial_accumulator=0.1, l1=0.01, l2=0.02,
         lr_power=-0.5),
    dict(name="adam", learning_rate=0.01, beta1=0.9, beta2=0.999, epsilon=1e-7),
], ids=lambda c: c["name"])
def test_embedding_apply_local_takes_the_steps_the_ps_takes_on_a_table(config, tmp_path):
    """pstrain.torch.Embedding's one-process rule against the ps's rows:
    the same lazy updates, the same arithmetic."""
    import pstrain.torch
    rng = np.random.default_rng(10)
    ids = np.stack([rng.choice(ROWS, 5, replace=False) for _ in range(STEPS)])
    grads = gradients(10, STEPS, 5)
    init = initial_values(10)
    got = replay(config, init, grads, tmp_path, ids=ids)
    emb = pstrain.torch.Embedding(ROWS, DIM, name="emb")
    emb.load_rows(np.arange(ROWS), init)
    hyper = {k: v for k, v in config.items()
             if k in ("initial_accumulator", "beta1", "beta2", "epsilon", "l1", "l2", "lr_power")}
    for s in range(STEPS):
        rows = emb(torch.from_numpy(ids[s]))
        (rows * torch.from_numpy(grads[s])).sum().backward()
        emb.apply_local(config["learning_rate"], config["name"], **hyper)
    want = emb(torch.arange(ROWS)).detach().numpy()
    assert_close(got, want, config["name"])
