"""The result every clustering routine returns (Lloyd, the reference variants, the transformers)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass
class ClusteringResult:
    """Trajectory and outcome of T clustering steps on a batch of B tasks.

    Attributes:
        centers: (B, T+1, k, d), entry t holds the centres after t steps (entry 0 = initial).
        labels: (B, n), the nearest centre of every point under the final centres.
        objective: (B, T+1), the k-means objective of ``centers[:, t]``.
        n_empty: (B, T) number of clusters that received no point at step t+1, or None where the
            routine has no notion of an empty cluster.
        assignments: (B, n, k) the assignment weights a model holds after its last step (one-hot
            for hard assignment, soft at finite temperature), or None.
    """

    centers: torch.Tensor
    labels: torch.Tensor
    objective: torch.Tensor
    n_empty: torch.Tensor | None = None
    assignments: torch.Tensor | None = None

    @property
    def steps(self) -> int:
        """Number of steps T."""
        return self.centers.shape[1] - 1

    @property
    def final_centers(self) -> torch.Tensor:
        """(B, k, d) centres after the last step."""
        return self.centers[:, -1]

    def log_objective(self) -> torch.Tensor:
        """Natural log of the objective, (B, T+1): the quantity the paper plots."""
        return self.objective.log()

    def mean_log_objective(self) -> torch.Tensor:
        """Average over tasks of the log-objective, (T+1,): one curve of the paper's figures."""
        return self.objective.log().mean(dim=0)

    def detach(self) -> ClusteringResult:
        """A copy whose tensors are detached from any autograd graph."""
        return ClusteringResult(**{f.name: _maybe(getattr(self, f.name), torch.Tensor.detach) for f in fields(self)})

    def to(self, device: str | torch.device) -> ClusteringResult:
        """A copy with every tensor moved to ``device``."""
        return ClusteringResult(
            **{f.name: _maybe(getattr(self, f.name), lambda t: t.to(device)) for f in fields(self)}
        )


def _maybe(value, fn):
    return None if value is None else fn(value)
