#!/bin/bash
# The wheels the GPU kit (bench/gpu_check.py) needs on a lent GPU machine that holds JAX, torch,
# numpy, psutil, pynvml and h5py but can fetch nothing (Python 3.12 there): keras_nbguard's own
# dependencies and Keras', at this venv's versions, pure Python or built for CPython 3.12.
#
#   bash bench/gpu_wheels.sh            # here: into .whl/ (git-ignored), about 23 MiB
#   # there, with .whl carried:
#   pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
#   python3 bench/gpu_check.py --only jax,torch,advice_torch,advice_torch_lstm,advice_jax,advice_jax_lstm
#
# TensorFlow can't travel so (its CUDA build and CUDA 12 libraries are gigabytes): its GPU paths
# need a machine that has it.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.whl}
names="keras namex optree ipython ipython_pygments_lexers jedi parso matplotlib_inline pexpect
ptyprocess prompt_toolkit wcwidth stack_data asttokens executing pure_eval traitlets ipywidgets
comm widgetsnbextension jupyterlab_widgets plotly anywidget psygnal"
pins=()
for name in $names; do
  pins+=("$(.venv/bin/pip freeze | grep -i -E "^${name//_/[-_]}==")")
done
grep -q '^/.whl/$' .git/info/exclude 2>/dev/null || echo /.whl/ >>.git/info/exclude
.venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dest" "${pins[@]}"
du -sh "$dest"
