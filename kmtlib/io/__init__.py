"""Model files: reading a saved :class:`~kmtlib.KMeansTransformer` of any format, with every old
configuration name and weight name it still maps. Read it when a model file does not load or when
you rename something a model file stores; skip it to learn how the circuit works (a model's
``save`` is in :mod:`kmtlib.transformer`).

* :mod:`.model_file`: :func:`~kmtlib.io.model_file.load_model` and :class:`~kmtlib.io.model_file.ModelFileError`;
"""
