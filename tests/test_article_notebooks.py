"""One notebook per article, executed top to bottom in a real kernel (nbclient): each reproduces
a problem, the tool names its cause, the fix is applied and the numbers after are shown."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from test_notebook import outputs_text

pytestmark = [pytest.mark.kernel, pytest.mark.slow]

NOTEBOOKS = Path(__file__).parent.parent / "notebooks"


def execute(name: str, tmp_path: Path) -> dict[str, str]:
    """The notebook run in ``tmp_path``; the text of each tagged cell's outputs, by tag."""
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    errors = [
        o
        for c in nb.cells
        for o in c.get("outputs", [])
        if o.get("output_type") == "error" and "raises-exception" not in c.metadata.get("tags", [])
    ]
    assert errors == []
    return {tag: outputs_text(c) for c in nb.cells for tag in c.metadata.get("tags", [])}


def kinds(text: str) -> list[str]:
    return re.findall(r"^(\w+): ", text, flags=re.MULTILINE)


def change(text: str, row: str) -> float:
    """The change column of one row of a ``%nbguard compare`` table, in seconds."""
    line = next(line for line in text.splitlines() if line.startswith(row))
    value, unit = re.search(r"([+-][\d.,]+) (ms|s)$", line.strip()).groups()
    return float(value.replace(",", "")) / (1000 if unit == "ms" else 1)


def test_slowdown_names_each_cause_and_the_fix_makes_the_fit_faster(tmp_path):
    shown = execute("slowdown.ipynb", tmp_path)
    assert kinds(shown["diagnose-callbacks"]) == ["callbacks"]
    assert "PredictEveryEpoch.on_epoch_end" in shown["diagnose-callbacks"]
    assert change(shown["compare-callbacks"], "fit ") < 0
    assert kinds(shown["diagnose-checkpoint"]) == ["checkpoint_io"]
    assert "ModelCheckpoint.on_epoch_end wrote" in shown["diagnose-checkpoint"]
    assert shown["diagnose-checkpoint-fixed"].startswith("no finding")
    assert kinds(shown["diagnose-input"]) == ["input_pipeline"]
    assert change(shown["compare-input"], "fit ") < 0


def test_memory_growth_names_each_cause_and_the_fix_clears_it(tmp_path):
    shown = execute("memory_growth.ipynb", tmp_path)
    assert kinds(shown["diagnose-kept"]) == ["stale_models"]
    assert "models[0]" in shown["diagnose-kept"]
    assert kinds(shown["diagnose-rebuilt"]) == ["dataset_rebuilt"]
    assert kinds(shown["diagnose-traced"]) == ["retracing"]
    assert kinds(shown["diagnose-piled"]) == ["state_growth"]
    assert "`predictions` (list) +1 item, +32.0 MiB" in shown["diagnose-piled"]
    for fixed in ("kept", "rebuilt", "traced"):
        assert shown[f"diagnose-{fixed}-fixed"].startswith("no finding"), fixed


def test_out_of_memory_names_the_batch_and_the_smaller_batch_fits(tmp_path):
    shown = execute("out_of_memory.ipynb", tmp_path)  # the failing cell is tagged to raise
    assert "HostMemoryLimit" in shown["raises-exception"]
    assert kinds(shown["diagnose-oom"]) == ["oom_batch"]
    assert "at batch_size=16384" in shown["diagnose-oom"]
    assert "passed --host-limit 400 MiB" in shown["diagnose-oom"]
    assert "try batch_size=8192" in shown["diagnose-oom"]
    status = next(line for line in shown["compare-oom"].splitlines() if line.startswith("status"))
    assert status.split()[1:] == ["oom", "ok"]
    assert "kerasrun 'predict' #1" in shown["predict"] and "status       ok" in shown["predict"]
    assert shown["diagnose-oom-fixed"].startswith("no finding")
