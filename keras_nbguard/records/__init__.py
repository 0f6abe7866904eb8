"""What a run is, as data, and how its figures read ("n/a" with a reason): the bottom layer, stdlib
only."""
