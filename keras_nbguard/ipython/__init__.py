"""The IPython layer: the magics and their options (argparse stops here), the cell runner, labels,
status."""
