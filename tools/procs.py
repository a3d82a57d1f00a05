"""Loopback ports and child processes, for the tests and the tools alike:
a free port, waiting for one to accept connections, starting a server
process (a broker, mosquitto) and stopping it with everything it started.

Children are started in their own process group (start_new_session), so a
Ctrl-C in the terminal reaches only the parent, which stops them in order,
and stop() can take a whole group (Spark's JVM under a Python job) down.
"""
import os
import signal
import socket
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def stop_on_signals(stop):
    """SIGTERM and SIGHUP set the event stop; Ctrl-C raises KeyboardInterrupt
    even where the program was started with SIGINT ignored (a command run with
    `&` by a non-interactive shell: Python then keeps it ignored)."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    signal.signal(signal.SIGINT, signal.default_int_handler)


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
    finally:
        s.close()


def reachable(host, port, timeout=0.2):
    """Whether host:port accepts a TCP connection now."""
    try:
        socket.create_connection((host, port), timeout).close()
        return True
    except OSError:
        return False


def wait_port(port, timeout=10.0, host="127.0.0.1", proc=None):
    """Wait until host:port accepts a connection; False on timeout or when
    proc (the server's Popen) exits first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if reachable(host, port):
            return True
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def python_env(*extra):
    """os.environ with PYTHONPATH naming this checkout's lib/ and pipeline/
    (and extra directories) first, for a child `python -m ...`."""
    paths = list(extra) + [os.path.join(ROOT, "lib"), os.path.join(ROOT, "pipeline"), ROOT]
    old = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(paths + old))


def umqtt3_broker_cmd(port, *args):
    """The command line of umqtt3's broker on 127.0.0.1:port."""
    return [sys.executable, "-m", "umqtt3.broker", "--host", "127.0.0.1", "--port", str(port)
            ] + list(args)


def start(cmd, port, timeout=20.0, **popen):
    """Popen(cmd) in its own process group, returned once it accepts
    connections on 127.0.0.1:port; RuntimeError (and the child stopped) if it
    exits or does not listen in time."""
    popen.setdefault("stdin", subprocess.DEVNULL)
    popen.setdefault("env", python_env())
    p = subprocess.Popen(cmd, start_new_session=True, **popen)
    if wait_port(port, timeout, proc=p):
        return p
    stop(p, 1)
    if p.returncode not in (None, -signal.SIGKILL, -signal.SIGTERM):
        raise RuntimeError("%s exited with status %d" % (os.path.basename(cmd[0]), p.returncode))
    raise RuntimeError("%s did not listen on 127.0.0.1:%d" % (os.path.basename(cmd[0]), port))


def stop(p, timeout=10.0):
    """SIGTERM to p (it saves its state and exits), SIGKILL to its whole
    process group if it has not exited in time; returns its exit status."""
    if p is None:
        return None
    if p.poll() is None:
        try:
            p.terminate()
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    kill_group(p)
    return p.wait()


def kill_group(p):
    """SIGKILL whatever is left of p's process group (children it started)."""
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
