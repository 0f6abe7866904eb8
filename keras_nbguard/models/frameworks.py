"""What is the user's and what is a framework's, told without importing Keras, TF or IPython:
``sys.modules`` says whether they are loaded, an object's ``__module__`` whose it is."""

from __future__ import annotations

import sys
import types
from typing import Any

from keras_nbguard import backends
from keras_nbguard.backends import package_of as package_of  # the leak finder's, from here

# Objects of these packages are framework internals: chains through them are not followed (it
# keeps the walk short). Keras callbacks (History included) are the exception: users hold those.
FRAMEWORKS = frozenset(
    {
        "keras",
        "tensorflow",
        "tf_keras",
        "tensorboard",
        "jax",
        "jaxlib",
        "torch",
        "optree",
        "tree",
        "absl",
        "h5py",
        "ml_dtypes",
        "google",
        "wrapt",
        "IPython",
        "ipykernel",
        "traitlets",
        "zmq",
        "tornado",
        "jupyter_client",
        "executing",
        "stack_data",
        "keras_nbguard",
    }
)
CONTAINERS = (dict, list, tuple, set, frozenset)
NODE_LISTS = frozenset(
    {"_inbound_nodes", "_outbound_nodes", "_inbound_nodes_value", "_outbound_nodes_value"}
)  # Keras 3 / Keras 2 (nodes.py)
# framework objects that hold the user's results, or code: TensorFlow's tf.function wrapping a
# closure of yours over a model (``train_step = tf.function(make_step(model))``)
_FOLLOWED = frozenset({"ExecutionResult", "Function"})


def model_classes() -> tuple[type, ...]:
    """The public Model class of each Keras imported, Keras 3's and Keras 2's (never imports
    one); empty when none is."""
    return backends.model_classes()


def callback_class() -> tuple[type, ...]:
    """The Callback class of each Keras imported: a tuple for ``isinstance`` (empty: none)."""
    return tuple(c for c in (k.callback_class for k in backends.loaded()) if c is not None)


def current_shell() -> Any:
    """The running IPython shell, if IPython is imported and has one (never imports IPython)."""
    get = getattr(sys.modules.get("IPython"), "get_ipython", None)
    return get() if get is not None else None


def worth_following(obj: Any, callback: tuple[type, ...]) -> bool:
    """Whether to keep walking up from ``obj`` (no: framework internals, modules)."""
    if issubclass(
        type(obj),
        (
            *CONTAINERS,
            types.CellType,
            types.MethodType,
            types.FrameType,
            types.TracebackType,
            BaseException,
        ),
    ):
        return True  # by type: a proxy (TF's _DictWrapper) also claims to be a dict
    if isinstance(obj, types.ModuleType):
        return False
    if isinstance(obj, types.FunctionType):
        return package_of(obj) not in FRAMEWORKS
    if isinstance(obj, callback) or type(obj).__name__ in _FOLLOWED or is_estimator(obj):
        return True
    return package_of(obj if isinstance(obj, type) else type(obj)) not in FRAMEWORKS


def is_estimator(obj: Any) -> bool:
    """A scikit-learn estimator (Keras' ``SKLearnClassifier``, scikeras' ``KerasClassifier``):
    the user's, whoever defined it; a fitted one keeps its model in ``model_``. False when
    scikit-learn is not imported (never imports it)."""
    base = getattr(sys.modules.get("sklearn.base"), "BaseEstimator", None)
    return base is not None and isinstance(obj, base)


def is_keras_nesting(outer: Any, name: Any) -> bool:
    """A link Keras made (``Sequential._functional``, ``Model._layers``), not the user's own."""
    if not isinstance(name, str) or not name.startswith("_") or name in NODE_LISTS:
        return False  # a node list: a call on the model, not a part of it (nodes.py)
    return (
        package_of(type(outer)) in FRAMEWORKS
        or name in ("_layers", "_functional")
        or name.startswith("_self_")
    )


def all_subclasses(cls: type) -> list[type]:
    """``cls`` and every class below it, each once."""
    out: list[type] = []
    todo = [cls]
    while todo:
        c = todo.pop()
        if c not in out:
            out.append(c)
            todo.extend(type.__subclasses__(c))
    return out


def instance_dict(obj: Any) -> Any:
    """``obj.__dict__`` without running a ``__getattr__`` of the object's own; None if none."""
    try:
        return object.__getattribute__(obj, "__dict__")
    except Exception:
        return None
