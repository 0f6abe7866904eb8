"""The rules of the layout that import-linter can't see ([tool.importlinter] in pyproject.toml
checks the imports): which modules may reach into a framework's private modules, and that the
package keeps few top-level entries."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import keras_nbguard

PACKAGE = Path(keras_nbguard.__file__).parent

# A framework's private module is read from sys.modules (never imported, so nothing is loaded
# that the user did not load), and only here, each for one measured or cleaned thing.
PRIVATE_MODULE_READERS = {
    "collectors/gpu.py": "TF's eager context: whether TF has initialized the GPU yet",
    "collectors/traces.py": "TF's tracing entry point: counting traces (and Keras' traceback "
    "filters, told to leave the counting hook's frame out)",
    "collectors/allocators.py": "JAX's backends: whether JAX has started (read its memory flags)",
    "collectors/input_clock.py": "Keras' PyDataset, Keras 2's Sequence adapters: timing input",
    "collectors/iterator_closing.py": "tf.data's iterator class: deleting iterators off the cell",
    "prepare/deepclean.py": "TF's op and context internals: the deep clean of dead runs",
    "prepare/recompiled.py": "TF's tf.function class: a recompiled Keras 2 model's old steps",
    "prepare/gcfreeze.py": "Keras' base classes: freezing framework objects out of gc",
    "prepare/tracing_warnings.py": "TF's count of recent traces: forgotten at a clear",
    "prepare/kept_state.py": "Keras' global state: name counters and settings kept at a clear",
    "isolation/registrations.py": "Keras' registry: the notebook's registrations made in a child",
    "isolation/random_state.py": "TF's eager context: its global seed and op seeds, to a child",
    "models/nodes.py": "Keras' node graph: which runs a layer still links to",
    "models/registry.py": "Keras' node class: telling a model's own nodes from others'",
    "advisor/batch_probe.py": "Keras' lazy TensorFlow: cloning on JAX or torch without loading TF",
}
PRIVATE = re.compile(r"^(tensorflow\.python|keras\.src|tf_keras\.src|jax\._src|torch\._)(\.|$)")


def private_module_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and PRIVATE.match(node.value)
    }


def test_only_the_listed_modules_name_a_frameworks_private_module():
    readers = {
        str(path.relative_to(PACKAGE)): names
        for path in PACKAGE.rglob("*.py")
        if (names := private_module_names(path))
    }
    assert set(readers) == set(PRIVATE_MODULE_READERS), readers


def test_the_private_module_check_sees_a_new_reader(tmp_path):
    module = tmp_path / "new.py"
    module.write_text('import sys\nops = sys.modules.get("tensorflow.python.framework.ops")\n')
    assert private_module_names(module) == {"tensorflow.python.framework.ops"}


def test_the_package_keeps_its_modules_in_packages_by_role():
    top_modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert top_modules == ["__init__.py", "_version.py"]
    packages = sorted(p.parent.name for p in PACKAGE.glob("*/__init__.py"))
    assert len(packages) <= 14, packages
