"""Training the learned single layer as in the paper (the authors' ``train.py`` and
``expt-run.sh`` in github.com/rithram/kmeans-trf).

Command line (every option has the paper's value as its default)::

    python -m kmtlib.train --d 32 --k 10 --n 512 --embedding onehot --seed 153476998 \\
        --steps 10000 --out runs/onehot_seed153476998 [--resume | --overwrite]

A folder that already holds a run is refused unless ``--resume`` (continue it; ``--steps`` may
grow, never fall below the step reached) or ``--overwrite`` (delete it and start again) is given.
``--seeds S1,S2,...`` instead of ``--seed`` trains a group of runs together, one folder
``OUT/seed<S>/`` each, every run as if trained alone (:mod:`kmtlib.training.group`).

Python::

    from kmtlib.training import TrainConfig, train
    summary = train(TrainConfig(d=8, k=6, n=128, steps=2000, seed=1), "runs/small")

The protocol: every step draws ``batch`` fresh tasks and random k-subset initial centres, applies
the layer once and minimises the mean over tasks of :func:`kmtlib.smoothed_objective` with Adam;
every ``eval_every`` steps (and at step 0 and at the end) the model is evaluated on fixed
validation tasks (``val_batches`` batches drawn from their own random stream), the metric being
the mean over tasks of objective(model, one step) / objective(one Lloyd step, same initial
centres; an empty cluster jumps to a random point, as in the authors' code), and the learning rate
follows ``ReduceLROnPlateau(factor=0.5, patience=5)`` on that metric.

What lands in the output folder:

* ``log.csv``: one row per evaluation: ``step, train_loss`` (mean training loss over the steps
  since the previous evaluation; empty at step 0), ``val_rel_objective``, ``val_log_objective``
  (mean log-objective after one model step), ``lr`` (the rate used in those steps), ``wall_s``.
* ``last.pt``: a full checkpoint at every evaluation (model, optimiser, scheduler, every random
  stream, step, the log so far and the best model so far); ``--resume`` continues from it and
  ends with exactly the weights of an uninterrupted run (same device and the same number of
  threads: float sums depend on how the work is split). ``previous.pt``: the checkpoint before it.
* ``best.pt``: the model with the best validation metric so far (a model file: ``kmtlib.load_model``).
* at the end: ``model.pt`` (the last weights, which the paper evaluates; ``kmtlib.load_model``) and
  ``manifest.json`` (command, configuration, versions, device, wall time, validation numbers).

Nothing finished is lost. Every file but the log is written atomically (a temporary file flushed
to disk, then renamed; leftover temporaries of a killed save are removed when a run starts), and
the log, appended row by row, is also held in the checkpoint. So ``--resume`` repairs a damaged
folder from its checkpoints and says so in one line per file on stderr: a log cut short, padded
with rows after the checkpoint, with garbage or repeated rows, or missing, is rewritten from the
checkpoint's copy (a log that was not just ahead of the checkpoint is kept as
``log.csv.damaged``); a missing or damaged ``last.pt`` is replaced by ``previous.pt`` (one
evaluation earlier, trained again exactly); a missing or damaged ``best.pt`` is restored; a
damaged ``manifest.json`` is set aside and written again at the end. What cannot be repaired (no
usable checkpoint, a checkpoint, manifest or model of another configuration, a run already past
``--steps``) is refused with an ``error:`` line naming the file, before any training step and
without changing any file.

Randomness flows from explicit generators seeded from the run seed: initial weights, training
tasks, validation tasks, dropout masks and the Lloyd reference each have their own stream (derived
with ``numpy.random.SeedSequence``), so changing e.g. the number of validation batches does not
change the training tasks.

The rooms of this package, each importing only rooms listed above it and the model room of
kmtlib (no other module of kmtlib imports them but the command's name, ``kmtlib.train``)::

    config      TrainConfig, derive_seeds: what determines a run
    tasks       the training batches and the validation tasks of a run, the validation metric
    state       model, optimiser, scheduler and random streams: fresh or from a checkpoint
    run_folder  the run's files and their names: log, checkpoints; atomic writes, the folder lock
    provenance  the fingerprint of the code that trained a run
    resume      how a folder is continued: every file checked, every repair planned first
    loop        train(), the TrainingRun that both trainers drive (and its manifest), step_alone, tune_malloc
    group       train_group(): runs of one shape trained together, each as if alone
    cli         python -m kmtlib.train (parser, main)
    sweep       a plan of runs cut into jobs, run serially or by submitit, resumable, timed
"""

from __future__ import annotations

from .config import EMBEDDINGS, LOSS_TEMPERATURE_RULES, TASK_FAMILIES, TrainConfig, derive_seeds
from .group import SHARED, configs_for_seeds, group_problem, parse_seeds, seed_folders, step_together, train_group
from .loop import prints_rows, progress_bar, step_alone, train, tune_malloc
from .provenance import source_fingerprint
from .run_folder import (
    BEST_FILE,
    CHECKPOINT_FILE,
    LOG_COLUMNS,
    LOG_FILE,
    MANIFEST_FILE,
    MODEL_FILE,
    PREVIOUS_FILE,
    RUN_FILES,
    RunFolderError,
    RunInUseError,
    check_run_options,
    checked_run_folder,
    load_checkpoint_model,
    parse_log,
    read_log,
)
from .tasks import make_validation_batches, make_validation_set, validation_metrics

__all__ = [
    "BEST_FILE",
    "CHECKPOINT_FILE",
    "EMBEDDINGS",
    "LOG_COLUMNS",
    "LOG_FILE",
    "LOSS_TEMPERATURE_RULES",
    "MANIFEST_FILE",
    "MODEL_FILE",
    "PREVIOUS_FILE",
    "RUN_FILES",
    "SHARED",
    "TASK_FAMILIES",
    "RunFolderError",
    "RunInUseError",
    "TrainConfig",
    "check_run_options",
    "checked_run_folder",
    "configs_for_seeds",
    "derive_seeds",
    "group_problem",
    "load_checkpoint_model",
    "make_validation_batches",
    "make_validation_set",
    "parse_log",
    "parse_seeds",
    "prints_rows",
    "progress_bar",
    "read_log",
    "seed_folders",
    "source_fingerprint",
    "step_alone",
    "step_together",
    "train",
    "train_group",
    "tune_malloc",
    "validation_metrics",
]
