"""The fast path: which kernel of :mod:`kmtlib.kernels` computes a block's attention, the whole
pass of a fixed-weight model, and the stacked runs of training. Read it when you care how fast
the model runs, not what it computes: nothing here changes a number beyond the last bits (tests
pin each kernel to the formula it replaces).

The formula is in :mod:`kmtlib.layer` and :meth:`kmtlib.KMeansTransformer.forward`, and it is
what runs: with ``model.fast`` (default True) the model passes :func:`attend` to
:meth:`~kmtlib.layer.KMeansLayer.forward`, which then computes each block's attention by a kernel
where one applies; ``model.fast = False`` runs every block by its formula. The choice is made
from the layer's configuration and the blocks' weights, read as plain data:

* :mod:`.choice`: where a kernel applies (hard self-attention in closed form, the points'
  self-attention in the data's coordinates, Euclidean soft-max with its hand-written backward)
  and :func:`attend`, the block's attention by it;
* :mod:`.whole_pass`: :class:`WholePass`, the whole forward pass of a fixed-weight model by
  :mod:`kmtlib.kernels.limit_model`, which a caller asks for by name (:func:`kmtlib.whole_pass`);
* :mod:`.run_stack`: S training runs of one shape in one pass (a leading run axis).
"""

from __future__ import annotations

from .choice import attend
from .whole_pass import WholePass, uses_whole_pass_kernel

__all__ = ["WholePass", "attend", "uses_whole_pass_kernel"]
