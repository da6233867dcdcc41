"""Speed kernels of kmtlib, each beside the plain formula it replaces and pinned to it by a test.

Nothing here changes what is computed, only how fast (and, through the order of a sum, at most
the last bits). ``model.fast`` (default True; set it to False to run every block by its formula
in :mod:`kmtlib.layer`) computes each block's attention by one where it applies; the whole pass of
:mod:`.limit_model` is asked for by name, ``kmtlib.whole_pass(model)``.

Kernels are leaves: tensors in, tensors out, no state on a model, and they import nothing of
kmtlib above them (only each other, :mod:`kmtlib._numerics` and :mod:`kmtlib._checks`). Which
kernel applies is decided in :mod:`kmtlib.fast.choice` from the model's configuration and
weights; scratch memory is the caller's (:class:`kmtlib.fast.WholePass`), never the model's.

* :mod:`.euclidean_softmax`: Euclidean soft-max attention with a hand-written backward pass and
  sparse dropout (the trainable layer; plain formula ``softmax(-s cdist(q, k)^2) @ v``).
* hard self-attention in closed form (:func:`kmtlib.fast.choice.closed_form_self_attention`
  says where): where the keys that
  attain a query's maximum are the copies of its own token (one map for queries and keys and
  exact Euclidean scores, or Theorem 2.2's dot-product form), and copies carry the same value
  (in the theorem's circuits a point's assignment is a function of the point), the averaging
  hard attention returns each token's own value (plain formula: the n x n attention matrix).
* :mod:`.point_attention`: the points' self-attention (SAX) of the trainable layer in the data's
  own coordinates: its tokens ``[x; 0]`` have only d non-zero coordinates, so its n x n products
  are about d wide instead of d + k, and the points, being data, need no gradient (plain
  formula: the Euclidean soft-max attention of the projected tokens).
* :mod:`.limit_model`: a whole forward pass of a fixed-weight model, with the point tokens
  stored coordinate-major (the paper's columns: memory (B, D, n)), updated in place, the weights'
  coordinate selectors evaluated as slices, scratch memory reused from layer to layer, the hard
  assignment of Theorem 2.1's limit written in one pass (CAX and SAX together, CAC's means read
  from it), and the objective read from the assignment the tokens hold (plain formula: the
  model's own loop).
* :mod:`.weights`: unnormalised attention weights, ``(U @ V) / Z`` (plain formula: the map's weights).
* :mod:`.scratch`, :mod:`.layout`: reused temporaries and blocked transposing copies.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Kernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor]
"""``kernel(q, k, v, dropout) -> output``: a block's attention on projected q, k, v."""
