"""Tools by audience: device/ (deploy, flash, selftest), desktop/ (demo,
simulate), measure/ (sizes, benchmarks); procs.py is shared with the tests.
Each runs from the repository root as `python -m tools.<group>.<name>`."""
