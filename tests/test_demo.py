"""The README's first command, `make demo`, as a short smoke test: our broker
on a free loopback port, three simulated nodes, the live view; it must stop
by itself and have received readings from every node."""
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_demo_runs_and_readings_arrive():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "demo.py"), "--seconds", "4",
                        "--nodes", "3", "--period", "0.2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "broker: umqtt3 on 127.0.0.1:" in r.stdout
    m = re.search(r"readings received: (\d+) from (\d+) nodes", r.stdout)
    assert m, r.stdout
    assert int(m.group(2)) == 3
    assert int(m.group(1)) >= 3
    for n in (1, 2, 3):
        assert re.search(r"node%d\s+online" % n, r.stdout), r.stdout
