"""The tf.data pipelines saved for isolated runs: saved once, sent again from the file, the file
gone with the pipeline (isolation/saved_datasets.py; the real pipeline: test_isolate_names)."""

from __future__ import annotations

import gc
import os

from keras_nbguard.isolation import saved_datasets
from keras_nbguard.isolation.saved_datasets import SavedDatasets


class Pipeline:  # stands for a tf.data.Dataset: an object that never changes once made
    pass


def test_a_pipeline_is_saved_once_and_its_file_goes_with_it():
    saved, made = SavedDatasets(), []

    def save(pipeline):
        made.append(pipeline)
        return b"zipped"

    pipeline = Pipeline()
    assert saved.zip_of(pipeline, save) == (b"zipped", False)
    assert saved.zip_of(pipeline, save) == (b"zipped", True)  # from the file
    assert len(made) == 1
    ((_, path),) = saved._saved.values()
    other = Pipeline()
    assert saved.zip_of(other, save) == (b"zipped", False)  # another pipeline: its own save
    del made[:], pipeline
    gc.collect()
    assert not os.path.exists(path) and len(saved._saved) == 1
    folder = os.path.dirname(path)
    saved.close()
    assert not os.path.exists(folder)


def test_a_file_that_went_is_saved_again():
    saved = SavedDatasets()
    pipeline = Pipeline()
    saved.zip_of(pipeline, lambda p: b"first")
    ((_, path),) = saved._saved.values()
    os.remove(path)  # a cleaned /tmp
    assert saved.zip_of(pipeline, lambda p: b"second") == (b"second", False)
    saved.close()


def test_a_pipeline_that_dies_at_the_interpreters_exit_still_takes_its_file(monkeypatch):
    """Seen at a kernel's exit after isolated runs: 'Exception ignored in forget', the module's
    globals already None (as Python's shutdown leaves them), and the file left behind."""
    saved, pipeline = SavedDatasets(), Pipeline()
    saved.zip_of(pipeline, lambda p: b"zipped")
    ((_, path),) = saved._saved.values()
    for name in ("contextlib", "os"):
        monkeypatch.setattr(saved_datasets, name, None)
    del pipeline
    gc.collect()
    assert not os.path.exists(path)
