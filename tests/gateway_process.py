"""Our broker as a gateway process for the bridge tests: its bridges from a
file in mosquitto's form, on a free port, its output in a log file. (Not
named gateway.py: the firmware's gateway module is imported by that name.)

    gw, port, log = start_gateway(tmp_path, "connection up\\naddress ...\\n",
                                  "--store", str(tmp_path / "store"))
    ... stop(gw)
"""
import subprocess

from tools.procs import free_port, start, umqtt3_broker_cmd


def start_gateway(d, conf, *args, sys_interval=0, log_name="gw.log"):
    """The broker with the bridges of conf (the file's text, written to
    d/bridge.conf) and the extra command-line args; (process, port, log)."""
    path = d / "bridge.conf"
    path.write_text(conf)
    port = free_port()
    log = d / log_name
    cmd = umqtt3_broker_cmd(port, "--sys-interval", str(sys_interval), "--bridge-config",
                            str(path), *args)
    with open(log, "wb") as out:
        gw = start(cmd, port, stdout=out, stderr=subprocess.STDOUT)
    return gw, port, log
