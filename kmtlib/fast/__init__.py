"""The fast path: which kernel of :mod:`kmtlib.kernels` runs a block, a layer step or a whole
forward pass, and the stacked runs of training. Read it when you care how fast the model runs,
not what it computes: nothing here changes a number beyond the last bits (tests pin each kernel
to the formula it replaces).

The formula is in :mod:`kmtlib.layer` and :meth:`kmtlib.KMeansTransformer.forward`. One switch,
``model.fast`` (default True), sends a forward pass here; ``model.fast = False`` runs exactly the
formula. The choice is made from the model's configuration and weights, read as plain data:

* :mod:`.choice`: where a kernel applies (hard self-attention in closed form, the points'
  self-attention in the data's coordinates, Euclidean soft-max with its hand-written backward,
  the fixed-weight model's whole forward pass of :mod:`kmtlib.kernels.limit_model`);
* :mod:`.forward`: the block, the layer step and the model's forward pass with those kernels;
* :mod:`.run_stack`: S training runs of one shape in one pass (a leading run axis).
"""

from __future__ import annotations

from .choice import uses_limit_kernel
from .forward import attend, layer_step, limit_forward, limit_steps

__all__ = ["attend", "layer_step", "limit_forward", "limit_steps", "uses_limit_kernel"]
