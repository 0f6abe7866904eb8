"""The random streams an isolated cell draws from: the notebook's, carried into the new process
and back.

A fresh process starts every stream anew: after ``keras.utils.set_random_seed(42)`` in a setup
cell, each isolated run drew other numbers (NumPy's first ``rand()`` 0.0551, then 0.1949, where a
plain run draws 0.3745), so a seeded notebook was not reproducible isolated. The child now
starts from the kernel's Python and NumPy states, Keras' global seed generator (Keras makes
each layer's seed from Python's ``random``) and TensorFlow's global seed with the stream its
ops without a seed of their own draw from (a fit's shuffle); a run that brings its names back
hands its states back too, so the next run goes on from them as a plain one would. The points
of a sweep all start from the same state. What TensorFlow's runtime keeps of its own (its
stateful random kernels) stays in each process: keras.io's MNIST convnet's first isolated run
after the seed has the plain run's losses to the last digit, its second does not."""

from __future__ import annotations

import ast
import contextlib
import random
import sys
import types
from collections.abc import Mapping
from typing import Any

from keras_nbguard.prepare.kept_state import KERAS3_STATE  # Keras 3's global attributes

GENERATOR = "global_seed_generator"  # Keras 3's, made on first use from Python's random
# TensorFlow's eager context: its global seed and the stream each op without a seed of its own
# draws its seed from (a fit's shuffle, a tf.data shuffle); tf.random.set_seed sets both
TF_CONTEXT = "tensorflow.python.eager.context"


def carried() -> dict[str, Any]:
    """This process's random states, as plain values; a stream that can't be read is left out
    (never raises: it is taken before and after every isolated cell)."""
    state: dict[str, Any] = {"python": random.getstate()}
    with contextlib.suppress(Exception):
        numpy = sys.modules.get("numpy")
        if numpy is not None:
            state["numpy"] = numpy.random.get_state()
    with contextlib.suppress(Exception):
        keras_state = sys.modules.get(KERAS3_STATE)
        if keras_state is not None:
            generator = keras_state.get_global_attribute(GENERATOR)
            keras = sys.modules["keras"]  # a torch tensor on a GPU goes through its own copy
            state["keras"] = (
                None if generator is None else keras.ops.convert_to_numpy(generator.state.value)
            )
    with contextlib.suppress(Exception):
        tf_context = sys.modules.get(TF_CONTEXT)
        context = tf_context.context() if tf_context is not None else None
        if getattr(context, "_seed", None) is not None:  # never seeded: a fresh process's own
            state["tensorflow"] = (context._seed, context._rng.getstate())  # type: ignore
    return state


def take_on(state: dict[str, Any] | None) -> None:
    """Draw on from ``state`` (``carried()``'s, from another process). Never raises: a state
    that can't be taken leaves this process's own."""
    if not state:
        return
    try:
        random.setstate(state["python"])
        if "numpy" in state:
            import numpy

            numpy.random.set_state(state["numpy"])
        if "keras" in state:
            _take_on_keras(state["keras"])
        if "tensorflow" in state:
            _take_on_tensorflow(*state["tensorflow"])
    except Exception:  # a newer or older Python's state: the streams stay this process's
        pass


def _take_on_keras(generator_state: Any) -> None:
    """Keras 3's global seed generator as the other process had it (None: not made yet there,
    so it is made from Python's random here too, as it would have been there). Where Keras is
    loaded already: made only for this, its variable would start TensorFlow's GPU before the
    cell could set memory growth."""
    keras_state, keras = sys.modules.get(KERAS3_STATE), sys.modules.get("keras")
    if keras_state is None or keras is None:
        return
    generator = None
    if generator_state is not None:  # named: an auto name would count on past the kernel's
        generator = keras.random.SeedGenerator(seed=0, name=GENERATOR)
        generator.state.assign(generator_state)
    keras_state.set_global_attribute(GENERATOR, generator)


def _take_on_tensorflow(seed: int, op_seeds: Any) -> None:
    """Where TensorFlow is here already (Keras on TensorFlow is, once a Keras object or the
    module was made for the cell): imported only for this, it cost a cell that never uses it
    seconds (the kernel's Keras imports it to seed it, on JAX and torch too)."""
    tf, tf_context = sys.modules.get("tensorflow"), sys.modules.get(TF_CONTEXT)
    if tf is None or tf_context is None:
        return
    tf.random.set_seed(seed)
    tf_context.context()._rng.setstate(op_seeds)


def drawn_from(source: str, namespace: Mapping[str, Any]) -> str | None:
    """The random stream a statement draws from when it runs, in words (None: none seen): a
    generator of yours (``rng``), a module's global one (``np.random``), directly or in a
    function of the notebook it calls. A stream moves on with each draw, and ``carried()`` and a
    pickled generator hand over its state now: a statement replayed in another process draws
    other numbers than it drew in the kernel (keras.io's text classification: ``reviews(32)``
    made other reviews and labels, and the isolated run trained and evaluated on them)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    for node in _run_now(tree):
        if isinstance(node, ast.Name) and node.id in namespace:
            value = namespace[node.id]
            if _is_stream(value) or _is_global_stream(value):
                return node.id
            if isinstance(value, types.FunctionType):
                inner = _drawn_in(value)
                if inner is not None:
                    return f"{inner} (in {node.id}())"
        elif (
            isinstance(node, ast.Attribute)
            and node.attr == "random"
            and isinstance(node.value, ast.Name)
            and _has_global_stream(namespace.get(node.value.id))
        ):
            return f"{node.value.id}.random"
    return None


def _run_now(tree: ast.AST) -> list[ast.AST]:
    """The nodes a statement runs as it runs: not the bodies of what it defines."""
    found: list[ast.AST] = []
    stack = [tree]
    while stack:
        node = stack.pop()
        found.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(node))
    return found


def _drawn_in(function: types.FunctionType) -> str | None:
    """A stream the function's own code reads from its globals (one call deep; its
    comprehensions and inner functions included)."""
    globals_ = function.__globals__
    names = _names_in(function.__code__)
    owners = [n for n in names if _has_global_stream(globals_.get(n))]
    for name in names:
        if name == "random" and owners:  # `np.random.rand()`: an attribute, among its names
            return f"{owners[0]}.random"
        value = globals_.get(name)
        if _is_stream(value) or _is_global_stream(value):
            return name
    return None


def _names_in(code: types.CodeType) -> list[str]:
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _names_in(const)
    return names


def _is_stream(value: Any) -> bool:
    """A generator object with a state of its own: NumPy's, Python's, TensorFlow's."""
    if isinstance(value, random.Random):
        return True
    kind = type(value)
    module = getattr(kind, "__module__", "") or ""
    if module.startswith("numpy.random"):
        return kind.__name__ in ("Generator", "RandomState")
    return kind.__name__ == "Generator" and module.startswith("tensorflow")


def _is_global_stream(value: Any) -> bool:
    """Python's ``random`` module, or ``numpy.random`` / ``tf.random`` bound by itself."""
    return isinstance(value, types.ModuleType) and value.__name__ in (
        "random",
        "numpy.random",
        "tensorflow.random",
        "tensorflow._api.v2.random",
    )


def _has_global_stream(value: Any) -> bool:
    """A module whose ``random`` is a global stream: NumPy, TensorFlow, Keras."""
    return isinstance(value, types.ModuleType) and value.__name__.split(".")[0] in (
        "numpy",
        "tensorflow",
        "keras",
    )
