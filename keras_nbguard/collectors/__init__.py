"""Collectors: each measures one thing for a run and never raises into the user's cell."""
