"""The quickstart notebook runs top to bottom in a real kernel (nbclient) and shows the runs."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.kernel

NOTEBOOK = Path(__file__).parent.parent / "notebooks" / "quickstart.ipynb"


def outputs_text(cell) -> str:
    parts = []
    for output in cell.get("outputs", []):
        data = output.get("data", {})
        error = f"{output['ename']}: {output['evalue']}" if "ename" in output else ""
        parts.append(data.get("text/plain", "") + output.get("text", "") + error)
    return "\n".join(parts)


def test_quickstart_executes_and_shows_five_runs(tmp_path):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(o.get("output_type") != "error" for c in code for o in c.get("outputs", []))
    first_run = outputs_text(code[2])
    assert "kerasrun 'mlp' #1" in first_run and "status       ok" in first_run
    assert "kerasrun 'mlp' #5" in outputs_text(code[3])
    table = outputs_text(code[4])
    rows = [line for line in table.splitlines() if line.startswith("mlp ")]
    assert len(rows) == 5 and all(" ok " in row for row in rows)
