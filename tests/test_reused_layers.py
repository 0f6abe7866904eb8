"""Which names a cell binds anew whatever happens: the rest keep their layers for the run."""

from __future__ import annotations

import pytest

from keras_nbguard.ipython.reused_layers import IPYTHON_CACHES, rebound_names


@pytest.mark.parametrize(
    ("cell", "rebound"),
    [
        ("model = make()\nhead, (a, *rest) = parts()", {"model", "head", "a", "rest"}),
        ("n: int = 3\nm: int", {"n"}),  # an annotation alone binds nothing
        ("with scope() as s:\n    model = make()", {"s", "model"}),
        (
            "try:\n    model = load()\nexcept OSError:\n    enc = make()\nfinally:\n    f = 1",
            {"model", "f"},
        ),
        ("if 'encoder' not in globals():\n    encoder = make()", set()),
        ("for i in range(3):\n    layer = make()\n    if i:\n        e = 1", {"i", "layer"}),
        ("while fits < 3:\n    model = make()", {"model"}),  # k-fold, early restarts
        ("encoder = encoder if ready else make()", set()),  # reads its old value
        ("encoder = globals().get('encoder') or make()", set()),
        ("total += 1", set()),
        ("import numpy as np, os.path\nfrom keras import layers as L", {"np", "os", "L"}),
        ("def build(): pass\nclass Head: pass", {"build", "Head"}),
        ("model = (", set()),  # not Python: nothing is taken as rebound
    ],
)
def test_rebound_names(cell, rebound):
    assert rebound_names(cell) == rebound


def test_only_ipythons_own_caches_are_passed_over():
    """A user's ``_encoder`` cache keeps its layer; ``Out[n]``'s and ``_3``'s are released."""
    caches = ["_", "__", "___", "_12", "_i", "_ii", "_i7", "_oh", "_ih", "_dh", "In", "Out"]
    assert all(IPYTHON_CACHES.fullmatch(name) for name in caches)
    assert not any(IPYTHON_CACHES.fullmatch(n) for n in ["_encoder", "_cache", "_i_model", "In2"])
