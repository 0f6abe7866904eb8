"""Which Keras the user has, told from ``sys.modules`` (never imports one): Keras 3 on its backend
(TensorFlow, JAX, torch) or Keras 2 (the ``tf_keras`` package, what ``tf.keras`` is under
``TF_USE_LEGACY_KERAS=1``). What differs between them for clearing and patching lives here; the
GPU, the trace count and the deep clean ask ``backend`` which of their paths to take.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

PACKAGES = ("keras", "tf_keras")  # the public packages whose Model we patch, Keras 3 first
BACKEND_NAMES = {
    "tensorflow": "TensorFlow",
    "jax": "JAX",
    "torch": "torch",
    "numpy": "NumPy",
    "openvino": "OpenVINO",
}
DEFAULT_POLICY = "float32"


def package_of(obj: Any) -> str:
    """The top-level package ``obj`` (a class, a function) was defined in ("" when it does not
    say): ``keras`` for Keras 3's, ``tf_keras`` for Keras 2's."""
    module = getattr(obj, "__module__", None)
    return module.partition(".")[0] if isinstance(module, str) else ""


@dataclass(frozen=True)
class Keras:
    """One Keras the user imported: its public package and the backend it computes with."""

    package: str  # "keras" (Keras 3) or "tf_keras" (Keras 2)
    module: ModuleType
    backend: str  # "tensorflow", "jax", "torch", ...

    @property
    def name(self) -> str:
        """How the user knows it: "Keras 3.15.1 (jax)", "Keras 2.21.0 (tf_keras)"."""
        version = getattr(self.module, "__version__", "?")
        where = self.backend if self.package == "keras" else "tf_keras"
        return f"Keras {version} ({where})"

    @property
    def model_class(self) -> type | None:
        model = getattr(self.module, "Model", None)
        return model if isinstance(model, type) else None

    @property
    def layer_class(self) -> type | None:
        layer = getattr(getattr(self.module, "layers", None), "Layer", None)
        return layer if isinstance(layer, type) else None

    @property
    def callback_class(self) -> type | None:
        return getattr(getattr(self.module, "callbacks", None), "Callback", None)

    def clear_session(self, collect: bool = True) -> None:
        """Keras' own ``clear_session``; ``collect=False``: without the full gc Keras 3 adds
        (a run collects once, after everything it lets go, not once per step)."""
        if self.package == "keras":
            clear = self.module.utils.clear_session
            try:
                clear(free_memory=collect)
            except TypeError:  # a Keras 3 before free_memory (3.6): it always collects
                clear()
        else:  # Keras 2 has it on its backend module only, and never collects
            self.module.backend.clear_session()

    def policy_name(self) -> str | None:
        try:
            if self.package == "keras":
                return str(self.module.config.dtype_policy().name)
            return str(self.module.mixed_precision.global_policy().name)
        except Exception:
            return None

    def set_policy(self, name: str) -> None:
        if self.package == "keras":
            self.module.config.set_dtype_policy(name)
        else:
            self.module.mixed_precision.set_global_policy(name)


def loaded() -> list[Keras]:
    """Every supported Keras the user has imported (none imported: an empty list)."""
    found = []
    for package in PACKAGES:
        module = sys.modules.get(package)
        if module is None or unsupported(module, package):
            continue
        found.append(Keras(package, module, _backend_of(module, package)))
    return found


def model_classes() -> tuple[type, ...]:
    """The public Model class of each Keras imported, Keras 3's and Keras 2's (never imports
    one); empty when none is."""
    return tuple(c for c in (k.model_class for k in loaded()) if c is not None)


def unsupported(module: ModuleType, package: str) -> str | None:
    """Why an imported Keras can't be measured, in words (None: it can)."""
    version = str(getattr(module, "__version__", ""))
    if package == "keras" and version.startswith(("1.", "2.")):
        return (
            f"standalone Keras {version} is not supported (fit timing, clearing and leaks "
            f"are off): use Keras 3, or Keras 2 as tf_keras (TF_USE_LEGACY_KERAS=1)"
        )
    if not isinstance(getattr(module, "Model", None), type):
        return f"{package} {version or '?'} has no public Model class: fits are not timed"
    return None


def unsupported_loaded() -> list[str]:
    """The reasons for every imported Keras we can't measure."""
    reasons = []
    for package in PACKAGES:
        module = sys.modules.get(package)
        why = unsupported(module, package) if module is not None else None
        if why:
            reasons.append(why)
    return reasons


def _backend_of(module: ModuleType, package: str) -> str:
    if package == "tf_keras":
        return "tensorflow"
    try:
        return str(module.config.backend())
    except Exception:
        return planned_backend()


def in_use() -> str | None:
    """The backend the user's Keras computes with: Keras 3's first, else Keras 2's
    ("tensorflow"); None when no Keras is imported."""
    kerases = loaded()
    return kerases[0].backend if kerases else None


def planned_backend(environ: Mapping[str, str] = os.environ) -> str:
    """The backend Keras 3 will pick once imported, read as Keras reads it: ``KERAS_BACKEND``,
    then ``~/.keras/keras.json`` (``KERAS_HOME`` moves it), else TensorFlow."""
    chosen = environ.get("KERAS_BACKEND")
    if chosen:
        return chosen
    home = environ.get("KERAS_HOME") or str(Path(environ.get("HOME", "~")).expanduser() / ".keras")
    return _configured_backend(home)


@functools.lru_cache(maxsize=4)
def _configured_backend(home: str) -> str:
    """Read once per folder, as Keras reads it once at import (a run asks several times)."""
    try:
        config: Any = json.loads((Path(home) / "keras.json").read_text())
        return str(config.get("backend") or "tensorflow")
    except (OSError, ValueError, AttributeError):
        return "tensorflow"


def current_backend() -> str:
    """The backend in use, or the one Keras will pick: what the GPU set-up prepares for."""
    return in_use() or planned_backend()
