"""Before a run: clearing Keras, the dtype policy, GPU set-up, frozen framework objects, the deep
clean; the resets."""
