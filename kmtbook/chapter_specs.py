"""Every chapter's parameters: their bounds and, for sizes, their value in each profile.

One :class:`~kmtbook.parameters.ChapterSpec` per chapter, its parameters in the order of the
chapter's parameters cell (which must declare exactly these names besides ``device``, ``seed``,
``profile`` and ``output_dir``; ``tests/test_notebooks.py`` checks it). A size's ``quick``, ``book``
and ``paper`` values are what the run takes when the parameters cell leaves it at ``0``; the
chapter contract's budgets (a quick run under a minute, a book chapter within 10 minutes on two
cores) are met with these values.
"""

from __future__ import annotations

from .parameters import ChapterSpec, option, size

SPECS: dict[str, ChapterSpec] = {
    spec.stem: spec
    for spec in (
        ChapterSpec(
            "01_kmeans_and_lloyd",
            {
                "n_tasks": size(int, quick=32, book=320, paper=3200, minimum=1),
                "steps": size(int, quick=20, book=20, paper=20, minimum=20),
                "example_n": size(int, quick=300, book=1000, paper=2000, minimum=2),
                "example_k": size(int, quick=4, book=5, paper=5, minimum=1, maximum="example_n"),
            },
        ),
        ChapterSpec(
            "02_kmeans_transformer",
            {
                "n_tasks": size(int, quick=60, book=300, paper=3000, minimum=3),
                "fig3_n": size(int, quick=2000, book=10000, paper=10000, minimum=10),
                "fig3_gamma": size(float, quick=1e4, book=1e4, paper=1e4, minimum=1e-12),
                "layers": size(int, quick=10, book=10, paper=10, minimum=1),
                "draws": size(int, quick=4, book=20, paper=100, minimum=1),
            },
        ),
        ChapterSpec(
            "03_temperature",
            {
                "grid_d": size(int, quick=2, book=6, paper=10, minimum=1, maximum=10),
                "grid_k": size(int, quick=2, book=6, paper=10, minimum=1, maximum=10),
                "grid_n": size(int, quick=2, book=4, paper=10, minimum=1, maximum=20),
                "max_n": size(int, quick=316, book=3162, paper=1000000, minimum=100),
                "grid_scale": size(int, quick=3, book=10, paper=10, minimum=1, maximum=10),
                "curve_n": size(int, quick=300, book=1500, paper=10000, minimum=10),
                "curve_tasks": size(int, quick=2, book=4, paper=10, minimum=1),
                "curve_gammas": size(int, quick=5, book=17, paper=17, minimum=2),
            },
        ),
        ChapterSpec(
            "04_dot_product_ffn",
            {
                "n_tasks": size(int, quick=60, book=300, paper=3000, minimum=3),
                "curve_n": size(int, quick=300, book=1000, paper=10000, minimum=10),
                "curve_tasks": size(int, quick=2, book=4, paper=10, minimum=1),
                "curve_gammas": size(int, quick=5, book=9, paper=17, minimum=2),
            },
        ),
        ChapterSpec(
            "05_training",
            {
                "weights_dir": option(str),
                "live_n": size(int, quick=32, book=128, paper=128, minimum=2),
                "live_d": size(int, quick=4, book=8, paper=8, minimum=1),
                "live_k": size(int, quick=3, book=6, paper=6, minimum=1, maximum="live_n"),
                "live_steps": size(int, quick=30, book=3000, paper=4000, minimum=1),
                "live_tasks": size(int, quick=16, book=320, paper=320, minimum=1),
                "n_tasks": size(int, quick=16, book=16, paper=320, minimum=1),
                "steps": size(int, quick=20, book=20, paper=20, minimum=20),
                "max_seeds": size(int, quick=1, book=10, paper=10, minimum=1),
            },
        ),
        ChapterSpec(
            "06_ablation_d_only",
            {
                "weights_dir": option(str),
                "n_tasks": size(int, quick=16, book=16, paper=320, minimum=1),
                "steps": size(int, quick=20, book=20, paper=20, minimum=20),
                "max_seeds": size(int, quick=1, book=10, paper=10, minimum=1),
            },
        ),
        ChapterSpec(
            "07_generalization",
            {
                "weights_dir": option(str),
                "n_tasks": size(int, quick=16, book=16, paper=320, minimum=1),
                "n_tasks_large": size(int, quick=2, book=2, paper=320, minimum=1),
                "steps": size(int, quick=20, book=20, paper=20, minimum=20),
                "max_seeds": size(int, quick=1, book=10, paper=10, minimum=1),
            },
        ),
        ChapterSpec(
            "08_training_dynamics",
            {
                "logs_dir": option(str),
                "weights_dir": option(str),
                "window": size(int, quick=50, book=50, paper=50, minimum=1),
                "live_n": size(int, quick=32, book=128, paper=512, minimum=2),
                "live_d": size(int, quick=4, book=8, paper=4, minimum=1),
                "live_k": size(int, quick=3, book=6, paper=6, minimum=1, maximum="live_n"),
                "live_steps": size(int, quick=30, book=1000, paper=10000, minimum=1),
                "live_inv_temp_a": size(float, quick=1.0, book=1.0, paper=1.0, minimum=1e-6),
                "live_inv_temp_b": size(float, quick=10.0, book=10.0, paper=10.0, minimum=1e-6),
            },
        ),
        ChapterSpec(
            "09_inside_the_layer",
            {
                "weights_dir": option(str),
                "n_tasks": size(int, quick=24, book=32, paper=320, minimum=2),
                "map_tasks": size(int, quick=2, book=4, paper=4, minimum=1, maximum=8),
                "map_points": size(int, quick=30, book=30, paper=30, minimum=10, maximum=512),
                "max_seeds": size(int, quick=1, book=10, paper=10, minimum=1),
                "theorem_gamma": option(float, minimum=1e-6),
            },
        ),
        ChapterSpec(
            "10_variants",
            {
                "n_tasks": size(int, quick=16, book=64, paper=512, minimum=2),
                "n": size(int, quick=120, book=300, paper=1000, minimum=30),
                "steps": size(int, quick=15, book=30, paper=50, minimum=2),
                "n_peer_tasks": size(int, quick=3, book=12, paper=48, minimum=1),
                "n_peer": size(int, quick=60, book=120, paper=300, minimum=20),
            },
        ),
        ChapterSpec(
            "11_performance",
            {
                "threads": size(int, quick=2, book=2, paper=2, minimum=1),
                "repeats": size(int, quick=5, book=5, paper=9, minimum=5),
                "max_n": size(int, quick=64, book=512, paper=512, minimum=32),
                "batch": size(int, quick=4, book=32, paper=32, minimum=4),
                "lloyd_tasks": size(int, quick=64, book=512, paper=4096, minimum=2),
                "large_n": size(int, quick=2000, book=10000, paper=100000, minimum=100),
                "run_steps": size(
                    int,
                    quick=10,
                    book=100,
                    paper=300,
                    minimum=lambda values: 2 * values["eval_every"],
                    multiple_of="eval_every",
                ),
                "eval_every": size(int, quick=5, book=50, paper=50, minimum=1),
                "group_runs": size(int, quick=2, book=2, paper=10, minimum=1),
            },
        ),
        ChapterSpec(
            "12_any_k",
            {
                "weights_dir": option(str),
                "forms_dir": option(str),
                "form_tasks": size(int, quick=4, book=32, paper=320, minimum=1),
                "n_tasks": size(int, quick=8, book=16, paper=320, minimum=1),
                "steps": size(int, quick=20, book=20, paper=20, minimum=1),
                "k_largest": size(int, quick=16, book=64, paper=64, minimum=4, maximum=64),
                "points_per_cluster": size(int, quick=8, book=16, paper=32, minimum=2),
                "scaled_tasks": size(int, quick=4, book=8, paper=320, minimum=1),
                "max_seeds": size(int, quick=1, book=3, paper=10, minimum=1),
                "seeded_layers": size(int, quick=1, book=1, paper=10, minimum=1),
                "perm_tasks": size(int, quick=16, book=48, paper=320, minimum=1),
            },
        ),
        ChapterSpec(
            "13_your_data",
            {
                "weights_dir": option(str),
                "paper_weights_dir": option(str),
                "datasets": option(str),
                "starts": size(int, quick=2, book=10, paper=100, minimum=1),
                "n_init": size(int, quick=2, book=10, paper=10, minimum=1, maximum="starts"),
                "steps": size(int, quick=20, book=20, paper=20, minimum=1),
                "max_points": size(int, quick=800, book=5000, paper=5000, minimum=10),
                "large_n": size(int, quick=800, book=2000, paper=5000, minimum=10),
                "large_starts": size(int, quick=1, book=3, paper=100, minimum=1),
                "cost_tasks": size(int, quick=8, book=32, paper=320, minimum=1),
                "compute_states": size(int, quick=2, book=3, paper=10, minimum=1),
            },
        ),
    )
}
"""The spec of every chapter, by stem."""
