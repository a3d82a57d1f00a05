# tools/measure/wear.py: the stores on littlefs2 wear few blocks per QoS 2
# message, and the tool refuses bad input in one line.
import pytest

from refusal import refused

littlefs = pytest.importorskip("littlefs")

from tools.measure import wear  # noqa: E402


@pytest.mark.parametrize("case", [wear.node, wear.gateway])
def test_erases_per_qos2_message(case):
    erases, progs = case(200, 4096, 64)
    assert progs > 0  # the store wrote to the flash
    assert erases / 200 <= 0.2


def test_bad_input_is_refused():
    refused("tools.measure.wear", ["--blocks", "x"], "--blocks")
    refused("tools.measure.wear", ["--messages", "0"], "--messages")
