"""Measurement: python -m tools.measure.sizes | codec | client | broker | ...

Every tool measures the checkout it is run from: its lib/ and pipeline/ go
first on sys.path and on the PYTHONPATH its child processes inherit, ahead of
whatever umqtt3 a virtual environment installed (the set-up installs umqtt3
editable from the checkout that made the environment, which is another tree
when several checkouts share one)."""
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_FIRST = [os.path.join(REPO, "lib"), os.path.join(REPO, "pipeline")]
sys.path[:0] = [p for p in _FIRST if p not in sys.path[:2]]
os.environ["PYTHONPATH"] = os.pathsep.join(
    _FIRST + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and p not in _FIRST])
