"""A model loaded in the kernel keeps its weights where TensorFlow keeps tensors.

Keras' loader assigns each variable from an h5py dataset; TensorFlow reads the dataset into a
NumPy array, the tensor it makes keeps that array's memory (glibc's heap), and the variable
adopts the tensor's buffer. So after an ``--isolate`` run the model that came back sat partly
outside TensorFlow's CPU pool, where the model it replaced lay and whose pages the pool keeps:
keras.io's text example's kernel moved by its embedding (10 MiB) from run to run, +1.85 MiB a
run over twelve. A copy made by TensorFlow puts every weight in its pool, as a fit would.
"""

from __future__ import annotations

import sys
from typing import Any


def moved_into_tensorflows_memory(model: Any) -> None:
    """Re-assign each TensorFlow variable of ``model`` and its optimizer from a copy TensorFlow
    allocates; the NumPy-made buffer is freed as the old tensor goes. A model of another
    backend (JAX, torch) is left as it is, and nothing imports TensorFlow for it."""
    tf = sys.modules.get("tensorflow")
    if tf is None:
        return
    for variable in _variables(model):
        held = getattr(variable, "_value", variable)  # Keras 3 wraps a tf.Variable
        if not isinstance(held, tf.Variable):
            continue
        try:
            held.assign(tf.raw_ops.DeepCopy(x=held.read_value()))
        except Exception:  # a dtype DeepCopy has no kernel for: left where it loaded
            continue


def _variables(model: Any) -> list[Any]:
    found = list(getattr(model, "variables", None) or [])
    optimizer = getattr(model, "optimizer", None)
    found += list(getattr(optimizer, "variables", None) or [])  # tf_keras: a callable list
    return found


def optimizer_unbuilt_again(model: Any) -> None:
    """Keras 3 builds a compiled model's optimizer as it loads it (``compile_from_config``),
    built or not when saved: keras.io's text example's ``end_to_end_model``, compiled and only
    evaluated, came back from ``--isolate`` with 21.4 MiB of Adam slots a plain run never makes
    (and ``%nbguard leaks`` counted them). An optimizer that never took a step (``iterations``
    0) is one Keras would build alike at its first: compiled anew, left unbuilt as it was. A
    model whose ``compile`` is its own (a GAN's) is left as it loaded (Keras skips it too)."""
    keras = sys.modules.get("keras")
    model_class = getattr(keras, "Model", None)
    optimizer = getattr(model, "optimizer", None)
    if keras is None or model_class is None or not isinstance(model, model_class):
        return
    if optimizer is None:
        return
    if type(model).compile is not model_class.compile or not getattr(optimizer, "built", False):
        return
    try:
        if int(optimizer.iterations.numpy()) != 0:
            return
        config = model.get_compile_config()
        if config:
            model.compile(**keras.saving.deserialize_keras_object(config))
    except Exception:  # a compile config Keras can't read back: it stays as it loaded
        pass
