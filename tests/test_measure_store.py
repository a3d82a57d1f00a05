# tools/measure/wear.py and fanout_store.py: the stores on littlefs2 wear few
# blocks per QoS 2 message, every fan-out message is acknowledged, and both
# tools refuse bad input in one line.
import pytest

from refusal import refused

from tools.measure import fanout_store


def test_fanout_store_refuses_bad_input():
    refused("tools.measure.fanout_store", ["--sessions", "0"], "--sessions")


def test_fanout_store_acknowledges_every_message():
    from umqtt3.broker_log import AppendFiles
    assert fanout_store.run(5, 3, AppendFiles()) > 0  # exits when a PUBACK is missing


@pytest.mark.parametrize("case", ["node", "gateway"])
def test_erases_per_qos2_message(case):
    pytest.importorskip("littlefs")
    from tools.measure import wear
    erases, progs = getattr(wear, case)(200, 4096, 64)
    assert progs > 0  # the store wrote to the flash
    assert erases / 200 <= 0.2


def test_bad_input_is_refused():
    refused("tools.measure.wear", ["--blocks", "x"], "--blocks")
    refused("tools.measure.wear", ["--messages", "0"], "--messages")
    refused("tools.measure.wear", ["--block-size", "130"], "multiple of 128")  # littlefs aborted
    refused("tools.measure.sizes", ["--heap", "1"], "--heap")  # the VM failed in every probe


@pytest.mark.parametrize("blocks", ["2", "5"])
def test_a_partition_too_small_is_one_line(blocks):
    # 2 blocks: littlefs refuses to mount; 5: the gateway's store fills and
    # the broker closes the publisher's link. Either way one line, exit 1.
    pytest.importorskip("littlefs")
    from refusal import run
    r = run("tools.measure.wear", "--blocks", blocks, "--messages", "20")
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    assert r.stderr.count("\n") == 1 and "give more --blocks" in r.stderr, r.stderr
