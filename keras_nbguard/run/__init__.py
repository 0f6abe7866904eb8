"""One run: prepare it, start the collectors, build its record; never raises into the cell."""
