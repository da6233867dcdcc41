"""kmtlib.fast.run_stack and kmtlib.training.group: S runs of one shape trained as one stacked pass.

* the stacked pass equals the models one by one (centres and every gradient), for runs of
  different seeds and dropout rates, with per-run and with batched products;
* a group reproduces the single-run trainer's logs and weights for runs that differ in seed,
  loss temperature and dropout rate (float64: to 1e-9 relative; whether they were equal to the
  last bit is reported, not asserted: that rests on how the products round);
* a group stopped and resumed, a group killed between two runs' checkpoints (so that one run
  lags), and the group command killed by SIGKILL, end as an uninterrupted group;
* the command line ``--seeds ... --out DIR`` writes DIR/seed<S>/ with the single-run contract;
* what cannot be grouped is refused before any folder changes.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from _helpers import kill_training_command, log_without_wall, one_thread  # noqa: F401 (one_thread: a fixture every test uses)

from kmtlib.fast.run_stack import RunStack
from kmtlib.init import init_centers
from kmtlib.io.model_file import load_model
from kmtlib.layer import update
from kmtlib.losses import smoothed_objective_unchecked
from kmtlib.training import TrainConfig, derive_seeds, group_problem, read_log, train, train_group
from kmtlib.training.cli import main
from kmtlib.training.state import new_training_state
from kmtlib.training.tasks import sample_batch

# Seeds, loss temperatures and dropout rates of the runs of one group (none of them a shipped run's).
RUNS = ((4711, 10.0, 0.01), (8803, 4.0, 0.01), (2219, 10.0, 0.05))
SMALL = dict(d=5, k=3, n=40, batch=4, eval_every=10, val_batches=2, steps=30)


pytestmark = pytest.mark.usefixtures("one_thread")


def _configs(**changes) -> list[TrainConfig]:
    return [TrainConfig(**{**SMALL, **changes}, seed=s, loss_inv_temp=t, dropout=p) for s, t, p in RUNS]


def _close_logs(a: list[dict], b: list[dict], rtol: float) -> bool:
    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b):
        for key in ra:
            x, y = ra[key], rb[key]
            if (x is None) != (y is None) or (x is not None and abs(x - y) > rtol * max(abs(x), abs(y), 1e-12)):
                return False
    return True


def _weights(path: Path, name: str = "model.pt") -> dict[str, torch.Tensor]:
    return load_model(path / name).state_dict()


def _one_step(configs: list[TrainConfig], stacked: bool, products: str = "auto"):
    """The centres after one training step and every run's gradients, stacked or one by one."""
    states = [new_training_state(c, torch.device("cpu"), derive_seeds(c.seed)) for c in configs]
    xs, cs = [], []
    for c, state in zip(configs, states):
        X = sample_batch(c, state.generators["train"], torch.device("cpu"), getattr(torch, c.dtype))
        xs.append(X)
        cs.append(init_centers(X, c.k, "random", generator=state.generators["train"]))
    if stacked:
        C1 = RunStack([s.model for s in states], products=products).step(torch.stack(xs), torch.stack(cs))
    else:
        C1 = torch.stack([s.model.step(X, C) for s, X, C in zip(states, xs, cs)])
    losses = [smoothed_objective_unchecked(X, C1[i], c.loss_inv_temp).mean()
              for i, (X, c) in enumerate(zip(xs, configs))]  # fmt: skip
    torch.stack(losses).sum().backward()
    grads = [{n: p.grad.clone() for n, p in s.model.named_parameters()} for s in states]
    return C1.detach(), grads


@pytest.mark.parametrize("products", ["per_run", "batched"])
@pytest.mark.parametrize("embedding", ["onehot", "data"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_stacked_pass_equals_the_models_one_by_one(products, embedding, dtype, record_property):
    # D = 8 (onehot) and 5 (data): odd widths too, where batched products round differently.
    configs = _configs(embedding=embedding, dtype=dtype)
    C_single, g_single = _one_step(configs, stacked=False)
    C_stack, g_stack = _one_step(configs, stacked=True, products=products)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(C_stack, C_single, **tol)
    for a, b in zip(g_stack, g_single):
        assert a.keys() == b.keys()
        for name in a:
            torch.testing.assert_close(a[name], b[name], **tol, msg=name)
    same_grads = all(torch.equal(a[n], b[n]) for a, b in zip(g_stack, g_single) for n in a)
    bitwise = torch.equal(C_stack, C_single) and same_grads
    record_property("bitwise", bitwise)


def test_the_stacked_step_runs_the_layers_own_update():
    """A profile hook on kmtlib.layer.update (what a breakpoint there would do) sees the stacked
    step of training enter it, once a step, with the runs' blocks and the stack's attention, as
    the layer's own forward does with its blocks: the update is written once, not again for the
    run axis."""
    configs = _configs(embedding="onehot", dtype="float64")
    states = [new_training_state(c, torch.device("cpu"), derive_seeds(c.seed)) for c in configs]
    stack = RunStack([s.model for s in states])
    X = torch.stack([sample_batch(c, s.generators["train"], torch.device("cpu"), torch.float64)
                     for c, s in zip(configs, states)])  # fmt: skip
    C = X[:, :, : configs[0].k].clone()
    calls: list[tuple[str, object]] = []

    def breakpoint_stand_in(frame, event, arg):
        if event == "call" and frame.f_code is update.__code__:
            calls.append((frame.f_back.f_code.co_qualname, frame.f_locals["attend"]))

    sys.setprofile(breakpoint_stand_in)
    try:
        with torch.no_grad():
            stack.step(X, C)
            stack.step(X, C)
            states[0].model.step(X[0], C[0])
    finally:
        sys.setprofile(None)
    assert [caller for caller, _ in calls] == ["RunStack.step", "RunStack.step", "KMeansLayer.forward"]
    assert all(attend == stack.attention for _, attend in calls[:2])


def test_group_reproduces_single_runs(tmp_path, record_property):
    configs = _configs(dtype="float64")
    for c in configs:
        train(c, tmp_path / f"single{c.seed}", quiet=True)
    summaries = train_group(configs, [tmp_path / f"group{c.seed}" for c in configs], quiet=True)
    assert [s["status"] for s in summaries] == ["finished"] * 3
    bitwise = True
    for c in configs:
        single, group = tmp_path / f"single{c.seed}", tmp_path / f"group{c.seed}"
        assert _close_logs(log_without_wall(group), log_without_wall(single), rtol=1e-9), c.seed
        for name in ("model.pt", "best.pt"):
            a, b = _weights(group, name), _weights(single, name)
            for key in a:
                torch.testing.assert_close(a[key], b[key], rtol=1e-9, atol=1e-12, msg=f"{c.seed} {name} {key}")
                bitwise = bitwise and torch.equal(a[key], b[key])
        bitwise = bitwise and log_without_wall(group) == log_without_wall(single)
        manifest = json.loads((group / "manifest.json").read_text())
        assert manifest["config"] == dataclasses.asdict(c)
        assert manifest["group"]["runs"] == 3
        # The runs really differ (a group of copies would pass the comparison above too).
    finals = {json.loads((tmp_path / f"group{c.seed}" / "manifest.json").read_text())["final_val_rel_objective"]
              for c in configs}  # fmt: skip
    assert len(finals) == 3
    record_property("bitwise", bitwise)


def test_float32_group_matches_single_runs_to_float_tolerance(tmp_path):
    configs = [dataclasses.replace(c, steps=10) for c in _configs()]
    for c in configs:
        train(c, tmp_path / f"single{c.seed}", quiet=True)
    train_group(configs, [tmp_path / f"group{c.seed}" for c in configs], quiet=True)
    for c in configs:
        group, single = tmp_path / f"group{c.seed}", tmp_path / f"single{c.seed}"
        assert _close_logs(log_without_wall(group), log_without_wall(single), rtol=1e-4)
        a, b = _weights(tmp_path / f"group{c.seed}"), _weights(tmp_path / f"single{c.seed}")
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=1e-4, atol=1e-5)


def test_stopped_group_resumes_to_the_uninterrupted_result(tmp_path):
    configs = _configs()
    straight = [tmp_path / f"straight{c.seed}" for c in configs]
    stopped = [tmp_path / f"stopped{c.seed}" for c in configs]
    train_group(configs, straight, quiet=True)
    first = train_group(configs, stopped, quiet=True, stop_at=15)
    assert [s["status"] for s in first] == ["stopped"] * 3
    # Stopped at step 15, as a single run stopped there says (not one step later).
    alone = train(configs[0], tmp_path / "alone", quiet=True, stop_at=15)
    assert alone["step"] == 15 and [s["step"] for s in first] == [15] * 3
    assert all(not (f / "model.pt").exists() for f in stopped)
    train_group(configs, stopped, quiet=True, resume=True)
    for a, b in zip(stopped, straight):
        # The same stacked arithmetic before and after the stop: the same numbers, to the last bit.
        assert log_without_wall(a) == log_without_wall(b)
        wa, wb = _weights(a), _weights(b)
        assert all(torch.equal(wa[k], wb[k]) for k in wa)


class _Killed(Exception):
    pass


def test_group_killed_between_checkpoints_resumes(tmp_path):
    """A kill after run 1's checkpoint at step 20 but before run 2's: run 2 lags one evaluation
    behind and trains alone until it has caught up."""
    configs = _configs(dtype="float64")
    straight = [tmp_path / f"straight{c.seed}" for c in configs]
    killed = [tmp_path / f"killed{c.seed}" for c in configs]
    train_group(configs, straight, quiet=True)

    def kill(index: int, row: dict) -> None:
        if index == 1 and row["step"] == 20:
            raise _Killed

    with pytest.raises(_Killed):
        train_group(configs, killed, quiet=True, callback=kill)
    steps = [torch.load(f / "last.pt", weights_only=True)["step"] for f in killed]
    assert steps == [20, 20, 10]
    summaries = train_group(configs, killed, quiet=True, resume=True)
    assert [s["status"] for s in summaries] == ["finished"] * 3
    for a, b in zip(killed, straight):
        assert _close_logs(log_without_wall(a), log_without_wall(b), rtol=1e-9)
        wa, wb = _weights(a), _weights(b)
        for key in wa:
            torch.testing.assert_close(wa[key], wb[key], rtol=1e-9, atol=1e-12)


def test_group_command_killed_by_sigkill_resumes(tmp_path):
    """The group command killed at a random moment (SIGKILL): every run folder holds a valid
    checkpoint, and resuming the group ends with the weights of a group trained in one go."""
    out, seeds = tmp_path / "killed", (41, 42, 43)
    tiny = dict(d=3, k=3, n=24, batch=8, eval_every=5, val_batches=2)
    args = [f"--{name.replace('_', '-')}={value}" for name, value in tiny.items()]
    args += ["--seeds", ",".join(map(str, seeds)), "--steps", "5000", "--threads", "1", "--quiet", "--out", str(out)]
    kill_training_command(args, lambda: all(len(read_log(out / f"seed{s}" / "log.csv")) >= 3 for s in seeds))
    steps = [torch.load(out / f"seed{s}" / "last.pt", weights_only=True)["step"] for s in seeds]
    assert all(step % 5 == 0 and 0 < step < 5000 for step in steps)
    total = max(steps) + 10
    configs = [TrainConfig(**tiny, seed=s, steps=total) for s in seeds]
    summaries = train_group(configs, [out / f"seed{s}" for s in seeds], quiet=True, resume=True, threads=1)
    assert [s["status"] for s in summaries] == ["finished"] * 3
    train_group(configs, [tmp_path / "straight" / f"seed{s}" for s in seeds], quiet=True, threads=1)
    for s in seeds:
        straight = tmp_path / "straight" / f"seed{s}"
        assert _close_logs(log_without_wall(out / f"seed{s}"), log_without_wall(straight), rtol=1e-5)
        a, b = _weights(out / f"seed{s}"), _weights(tmp_path / "straight" / f"seed{s}")
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6)


def test_command_line_writes_one_folder_per_seed(tmp_path, capsys):
    out = tmp_path / "grp"
    base = ["--d", "4", "--k", "3", "--n", "24", "--batch", "4", "--eval-every", "5", "--val-batches", "1", "--quiet"]
    args = [*base, "--steps", "10", "--seeds", "31,32", "--out", str(out)]
    result = main(args)
    assert [Path(s["out_dir"]).name for s in result["runs"]] == ["seed31", "seed32"]
    for seed in (31, 32):
        folder = out / f"seed{seed}"
        assert {p.name for p in folder.iterdir()} >= {"log.csv", "last.pt", "best.pt", "model.pt", "manifest.json"}
        manifest = json.loads((folder / "manifest.json").read_text())
        assert manifest["seed"] == seed and "--seeds 31,32" in manifest["command"]
    # The single-run contract: a folder that holds a run is refused without --resume ...
    with pytest.raises(SystemExit, match="already holds a training run"):
        main(args)
    # ... and --resume with more steps extends both runs.
    main([*base, "--steps", "15", "--seeds", "31,32", "--out", str(out), "--resume"])
    assert read_log(out / "seed31" / "log.csv")[-1]["step"] == 15
    with pytest.raises(SystemExit, match="--seed and --seeds exclude each other"):
        main([*args, "--seed", "5"])
    with pytest.raises(SystemExit, match="repeats 3"):
        main([*base, "--seeds", "3,3", "--out", str(tmp_path / "x")])


def test_group_command_sharing_a_folder_is_refused_in_one_line(tmp_path):
    """``python -m kmtlib.train --seeds ...`` into a folder another process trains in: one
    ``error:`` line, no traceback (the RunInUseError raised is the one the command catches)."""
    from kmtlib.training.run_folder import run_lock

    out = tmp_path / "grp"
    (out / "seed41").mkdir(parents=True)
    args = ["--d", "4", "--k", "3", "--n", "24", "--batch", "4", "--eval-every", "5", "--val-batches", "1",
            "--steps", "5", "--quiet", "--seeds", "41,42", "--out", str(out)]  # fmt: skip
    with run_lock(out / "seed41"):
        proc = subprocess.run([sys.executable, "-m", "kmtlib.train", *args], capture_output=True, text=True)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: ") and "in use by another training process" in proc.stderr, proc.stderr


def test_what_cannot_be_grouped_is_refused_before_any_change(tmp_path):
    a, b = TrainConfig(**SMALL, seed=1), TrainConfig(**{**SMALL, "d": 6}, seed=2)
    assert "differ in d" in group_problem([a, b])
    mixed = TrainConfig(**{**SMALL, "k": 3, "k_min": 2, "k_max": 4}, seed=3)
    assert "draws its k per batch" in group_problem([mixed])
    with pytest.raises(ValueError, match="differ in d"):
        train_group([a, b], [tmp_path / "a", tmp_path / "b"])
    assert not (tmp_path / "a").exists()
    # A folder that holds a run refuses the whole group: the other folder gets no file.
    train(dict(SMALL, seed=1, steps=5), tmp_path / "held", quiet=True)
    before = {p.name: p.read_bytes() for p in (tmp_path / "held").iterdir() if p.is_file()}
    c = TrainConfig(**SMALL, seed=2)
    with pytest.raises(FileExistsError, match="already holds a training run"):
        train_group([c, a], [tmp_path / "fresh", tmp_path / "held"])
    assert not any(p.name != ".lock" for p in (tmp_path / "fresh").iterdir())
    assert {p.name: p.read_bytes() for p in (tmp_path / "held").iterdir() if p.is_file()} == before
    with pytest.raises(ValueError, match="same run folder"):
        train_group([a, c], [tmp_path / "same", tmp_path / "same"])
