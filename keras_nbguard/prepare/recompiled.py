"""Keras 2 keeps a model's step functions from before each ``compile``, graphs and all.

tf_keras' ``Model.compile`` runs with attribute tracking off, so the ``train_function = None``
(and ``test_function``, ``predict_function``, ``train_tf_function``) it sets skips
``Layer.__delattr__``: the old ``tf.function`` stays in the model's attribute reference counts
(``_obj_reference_counts_dict``) and in its checkpoint dependencies, as if an attribute still
held it. A model that lives on and is compiled again before each fit — keras.io's fine-tuning
cell re-run — keeps every earlier fit's traced graphs: +44 MiB a run on Keras 2, bare as under
the magic. Keras 3 keeps neither record.

``forget_replaced_step_functions`` does what that ``__delattr__`` would have done, for the step
functions no attribute of the model holds any longer. TensorFlow's private layout is read
defensively: a model without it is left alone.
"""

from __future__ import annotations

import sys
from typing import Any

FUNCTION_MODULE = "tensorflow.python.eager.polymorphic_function.polymorphic_function"
COUNTS = "_obj_reference_counts_dict"  # tf_keras' Layer: value -> attributes holding it
STEP_ATTRIBUTES = ("train_function", "test_function", "predict_function", "train_tf_function")


def forget_replaced_step_functions(model: Any) -> int:
    """Drop, from a Keras 2 ``model``'s records, the ``tf.function``s that no attribute of it
    holds any longer; how many went from its reference counts (0 on Keras 3)."""
    counts = model.__dict__.get(COUNTS) if hasattr(model, "__dict__") else None
    function_class = getattr(sys.modules.get(FUNCTION_MODULE), "Function", None)
    if counts is None or not isinstance(function_class, type):
        return 0
    held = {id(value) for value in vars(model).values()}
    replaced = [f for f in list(counts) if isinstance(f, function_class) and id(f) not in held]
    for function in replaced:
        del counts[function]
    dependencies = getattr(model, "_unconditional_dependency_names", None)
    if isinstance(dependencies, dict) and hasattr(model, "_delete_tracking"):
        for name in STEP_ATTRIBUTES:
            tracked = dependencies.get(name)
            if isinstance(tracked, function_class) and tracked is not getattr(model, name, None):
                model._delete_tracking(name)
    return len(replaced)
