"""Lookup tables whose memory goes with them (prepare/lookup_tables.py), and the models that come
back from --isolate: their TextVectorization's vocabulary no longer stays once a run."""

from __future__ import annotations

import gc

import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from keras_nbguard.isolation import back  # noqa: E402
from keras_nbguard.prepare.lookup_tables import freed_with_their_objects  # noqa: E402


def _table():
    keys = tf.constant(["a", "b", "c"])
    values = tf.constant([1, 2, 3], dtype=tf.int64)
    return tf.lookup.StaticHashTable(tf.lookup.KeyValueTensorInitializer(keys, values), -1)


def _size(handle) -> int:
    return int(tf.raw_ops.LookupTableSizeV2(table_handle=handle))


def test_tensorflow_keeps_a_dropped_tables_contents_without_us():
    table = _table()
    handle = table.resource_handle
    del table
    gc.collect()
    assert _size(handle) == 3, "TensorFlow frees a dropped table now: lookup_tables.py can go"


def test_a_table_made_inside_is_destroyed_once_collected_and_not_before():
    with freed_with_their_objects():
        table = _table()
    handle = table.resource_handle
    assert int(table.lookup(tf.constant("b"))) == 2  # alive: it works, after the scope too
    assert _size(handle) == 3
    del table
    gc.collect()
    with pytest.raises(tf.errors.NotFoundError):
        _size(handle)


def test_the_table_classes_are_as_they_were_after_the_scope():
    before = tf.lookup.StaticHashTable.__dict__["__init__"]
    mutable = tf.lookup.experimental.MutableHashTable.__dict__["__init__"]
    with freed_with_their_objects():
        assert tf.lookup.StaticHashTable.__dict__["__init__"] is not before
    assert tf.lookup.StaticHashTable.__dict__["__init__"] is before
    assert tf.lookup.experimental.MutableHashTable.__dict__["__init__"] is mutable


def test_a_model_that_comes_back_takes_its_vocabulary_along_when_it_goes(tmp_path):
    inputs = keras.Input(shape=(1,), dtype="string")
    lookup = keras.layers.StringLookup(vocabulary=["red", "green", "blue"])
    model = keras.Model(inputs, lookup(inputs))
    path = tmp_path / "m.keras"
    model.save(path)
    loaded = back._load_model("keras", path.read_bytes())
    table = next(
        layer.lookup_table
        for layer in loaded._flatten_layers(include_self=True, recursive=True)
        if isinstance(layer, keras.layers.StringLookup)
    )
    assert loaded(tf.constant([["green"]])).numpy().tolist() == [[2]]
    handle = table.resource_handle
    del loaded, table
    gc.collect()
    with pytest.raises(tf.errors.NotFoundError):
        _size(handle)
