"""The test tasks of the variants chapter: ring mixtures, unit-length points, centre errors.

Chapter 10 compares each circuit variant with its reference algorithm and with Lloyd's on tasks
whose true cluster means are known; these helpers draw such tasks and score the centres found.
"""

from __future__ import annotations

import itertools
import math
import time

import torch

from .arguments import check_flag

F64 = torch.float64


def unit_rows(v: torch.Tensor) -> torch.Tensor:
    """``v`` with every row (last dimension) scaled to unit Euclidean length."""
    return v / v.norm(dim=-1, keepdim=True)


def center_error(C: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """Root mean squared distance ``(B,)`` between centres ``C`` and true means ``M`` (both
    ``(B, k, d)``), under the best matching of centres to means (all ``k!`` of them tried)."""
    k = C.shape[1]
    perms = torch.tensor(list(itertools.permutations(range(k))), device=C.device)
    cost = ((C[:, perms] - M.unsqueeze(1)) ** 2).sum(-1).mean(-1)  # (B, k!)
    return cost.amin(-1).sqrt()


def ring_mixture(
    generator: torch.Generator,
    B: int,
    n: int,
    k: int,
    d: int,
    separation: float,
    *,
    rotate: bool = True,
    device: torch.device | str = "cpu",
):
    """``B`` tasks of ``n`` points from ``k`` isotropic unit-variance Gaussian clusters of equal size,
    whose means sit evenly on a ring of radius ``separation`` (a random rotation and offset per task).

    Drawn in float64 on the CPU from ``generator``, then moved to ``device``; returns the points
    ``X`` ``(B, n, d)``, the true means ``(B, k, d)`` and the labels ``(B, n)``."""
    rotate = check_flag("rotate", rotate)
    angles = 2 * math.pi * torch.arange(k, dtype=F64) / k
    base = torch.zeros(k, d, dtype=F64)
    base[:, 0], base[:, 1] = torch.cos(angles), torch.sin(angles)
    means = separation * base.expand(B, k, d).clone()
    if rotate:
        Q, _ = torch.linalg.qr(torch.randn(B, d, d, generator=generator, dtype=F64))
        means = means @ Q
    means = means + 3 * torch.randn(B, 1, d, generator=generator, dtype=F64)
    labels = torch.arange(n) % k
    labels = labels[torch.randperm(n, generator=generator)].expand(B, n)
    X = torch.gather(means, 1, labels.unsqueeze(-1).expand(B, n, d))
    X = X + torch.randn(B, n, d, generator=generator, dtype=F64)
    return X.to(device), means.to(device), labels.to(device)


def tie_free(X: torch.Tensor, centers: torch.Tensor, margin: float = 1e-9) -> torch.Tensor:
    """Tasks ``(B,)`` whose assignment is decided by more than ``margin`` at every step of a
    trajectory ``centers`` ``(B, T+1, k, d)``: on them a circuit and its reference must agree
    whatever order a product sums in."""
    D = ((X.unsqueeze(1).unsqueeze(3) - centers.unsqueeze(2)) ** 2).sum(-1)  # (B, T+1, n, k)
    top2 = D.topk(2, dim=-1, largest=False).values
    return (top2[..., 1] - top2[..., 0]).amin(dim=(1, 2)) > margin


def cosine_labels(X: torch.Tensor, C: torch.Tensor) -> torch.Tensor:
    """The label ``(B, n)`` of every point under the cosine rule: the centre of largest cosine similarity."""
    return torch.bmm(unit_rows(X), unit_rows(C).transpose(1, 2)).argmax(-1)


def mean_ari(labels: torch.Tensor, truth: torch.Tensor) -> float:
    """The adjusted Rand index of ``labels`` with ``truth`` (both ``(B, n)``), averaged over the tasks."""
    import numpy as np
    from sklearn.metrics import adjusted_rand_score

    pairs = zip(truth.cpu().numpy(), labels.cpu().numpy())
    return float(np.mean([adjusted_rand_score(t, lab) for t, lab in pairs]))


def directional_clusters(generator: torch.Generator, B: int, n: int, *, device: torch.device | str = "cpu"):
    """``B`` tasks of ``n`` points in the plane around three directions (a random rotation per task):
    each point's angle scattered by 0.3 rad around its cluster's direction, its length log-uniform
    in [0.2, 5]. Returns the points ``(B, n, 2)`` on ``device`` and the labels ``(B, n)`` (CPU)."""
    directions = 2 * math.pi * torch.rand(B, 1, generator=generator, dtype=F64)
    directions = directions + 2 * math.pi * torch.arange(3, dtype=F64) / 3
    labels = (torch.arange(n) % 3)[torch.randperm(n, generator=generator)].expand(B, n)
    theta = torch.gather(directions, 1, labels) + 0.3 * torch.randn(B, n, generator=generator, dtype=F64)
    log_length = math.log(0.2) + (math.log(5) - math.log(0.2)) * torch.rand(B, n, generator=generator, dtype=F64)
    X = (torch.exp(log_length).unsqueeze(-1) * torch.stack([theta.cos(), theta.sin()], -1)).to(device)
    return X, labels


def cauchy_clusters(
    generator: torch.Generator,
    B: int,
    n: int,
    k: int,
    radius: float = 6.0,
    scale: float = 0.7,
    *,
    device: torch.device | str = "cpu",
):
    """``k`` clusters in the plane, locations on a ring of ``radius`` (a random rotation and offset per
    task), points = location + ``scale`` times independent standard Cauchy coordinates.

    Returns the points ``(B, n, 2)``, the locations ``(B, k, 2)`` and the labels ``(B, n)``, on ``device``."""
    angles = 2 * math.pi * (torch.arange(k, dtype=F64) / k + torch.rand(B, 1, generator=generator, dtype=F64))
    M = radius * torch.stack([angles.cos(), angles.sin()], -1)
    M = M + 3 * torch.randn(B, 1, 2, generator=generator, dtype=F64)
    labels = (torch.arange(n) % k)[torch.randperm(n, generator=generator)].expand(B, n).contiguous()
    X = torch.gather(M, 1, labels.unsqueeze(-1).expand(B, n, 2))
    X = X + scale * torch.empty(B, n, 2, dtype=F64).cauchy_(generator=generator)
    return X.to(device), M.to(device), labels.to(device)


def ring_with_outliers(
    generator: torch.Generator,
    B: int,
    n: int,
    k: int,
    radius: float = 6.0,
    share: float = 0.05,
    side: float = 60.0,
    *,
    device: torch.device | str = "cpu",
):
    """``k`` unit-variance Gaussian clusters on a ring of ``radius`` plus a ``share`` of the points
    (the first ones of every task) uniform on a square of side ``side`` around them.

    Returns the points ``(B, n, 2)`` and the true means ``(B, k, 2)``, on ``device``."""
    angles = 2 * math.pi * (torch.arange(k, dtype=F64) / k + torch.rand(B, 1, generator=generator, dtype=F64))
    M = radius * torch.stack([angles.cos(), angles.sin()], -1)
    M = M + 3 * torch.randn(B, 1, 2, generator=generator, dtype=F64)
    labels = (torch.arange(n) % k)[torch.randperm(n, generator=generator)].expand(B, n)
    X = torch.gather(M, 1, labels.unsqueeze(-1).expand(B, n, 2))
    X = X + torch.randn(B, n, 2, generator=generator, dtype=F64)
    n_out = max(1, round(share * n))
    X[:, :n_out] = M.mean(1, keepdim=True) + side * (torch.rand(B, n_out, 2, generator=generator, dtype=F64) - 0.5)
    return X.to(device), M.to(device)


def nearest_point_distance(X: torch.Tensor, C: torch.Tensor) -> float:
    """The distance from every centre to its nearest data point, averaged over centres and tasks
    (0 for medoids, which are data points)."""
    return float(((C.unsqueeze(2) - X.unsqueeze(1)) ** 2).sum(-1).amin(-1).sqrt().mean())


def gibbs_chi_square(picks, labels, D, tau: float) -> tuple[float, int]:
    """Pearson's chi-square of the medoids one k-medoids step picked against their Gibbs law.

    ``picks`` ``(R, k)``: the member each of ``R`` repeats of one task chose for every cluster;
    ``labels`` ``(n,)`` the clusters of that step, ``D`` ``(n, n)`` the squared distances. The law of
    member ``i`` of cluster ``j`` is proportional to ``exp(-cost_j(i) / tau)``, ``cost_j(i)`` the sum
    of its squared distances to the members. Members with an expected count below 5 are pooled into
    one cell. Returns the statistic and its degrees of freedom, summed over the clusters."""
    import numpy as np

    R = picks.shape[0]
    chi2, dof = 0.0, 0
    for j in range(picks.shape[1]):
        members = np.flatnonzero(labels == j)
        if len(members) < 2:
            continue
        cost = D[np.ix_(members, members)].sum(1)
        probs = np.exp(-(cost - cost.min()) / tau)
        probs /= probs.sum()
        counts = np.array([(picks[:, j] == i).sum() for i in members])
        keep = probs * R >= 5  # pool the rare members into one cell (chi-square needs expected counts >= 5)
        obs = np.append(counts[keep], counts[~keep].sum())
        exp = np.append(probs[keep], probs[~keep].sum()) * R
        obs, exp = obs[exp > 0], exp[exp > 0]
        if len(obs) > 1:
            chi2 += float(((obs - exp) ** 2 / exp).sum())
            dof += len(obs) - 1
    return chi2, dof


def timed_run(model, X: torch.Tensor, C0: torch.Tensor, steps: int):
    """Run ``model`` without autograd and time it: the median of three runs, or one run when the
    first takes over a second. Returns the last result and the seconds."""
    import numpy as np

    times: list[float] = []
    while len(times) < (3 if not times or times[0] < 1.0 else 1):  # slow models: one run
        start = time.perf_counter()
        with torch.inference_mode():
            out = model(X, C0, steps=steps)
        if X.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return out, float(np.median(times))
