"""Start and stop Debian's mosquitto for the interop tests and the benchmark.

    b = Broker(workdir)          # picks a free loopback port
    b.start(); ...; b.stop()     # stop() sends SIGTERM: mosquitto saves its db
    b.start()                    # same port, same persistence directory

Every wait has a deadline; kill() is the SIGKILL fallback used at teardown.
"""
import os
import shutil
import signal
import subprocess
import time

from tools.procs import free_port, wait_port  # noqa: F401  (tests import them from here too)

MOSQUITTO = shutil.which("mosquitto") or (
    "/usr/sbin/mosquitto" if os.path.exists("/usr/sbin/mosquitto") else None)
MOSQUITTO_PUB = shutil.which("mosquitto_pub")
MOSQUITTO_SUB = shutil.which("mosquitto_sub")
# mosquitto_sub's stdout is block-buffered into a pipe; stdbuf makes it
# line-buffered so a test sees each message as it arrives
LINEBUF = [shutil.which("stdbuf"), "-oL"] if shutil.which("stdbuf") else []


class Broker:
    def __init__(self, workdir, port=None, persistence=False, tls=None, extra=()):
        """tls: (certfile, keyfile) to listen with TLS instead of plain TCP."""
        self.dir = str(workdir)
        os.makedirs(self.dir, exist_ok=True)
        self.port = port or free_port()
        self.persistence = persistence
        self.tls = tls
        self.extra = list(extra)
        self.proc = None
        self.conf = os.path.join(self.dir, "mosquitto.conf")
        self.log = os.path.join(self.dir, "mosquitto.log")
        self._write_conf()

    def _write_conf(self):
        lines = ["listener %d 127.0.0.1" % self.port, "allow_anonymous true"]
        if self.tls:
            lines += ["certfile %s" % self.tls[0], "keyfile %s" % self.tls[1]]
        if self.persistence:
            db = os.path.join(self.dir, "db") + "/"
            os.makedirs(db, exist_ok=True)
            lines += ["persistence true", "persistence_location %s" % db,
                      "autosave_interval 1"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            # as root mosquitto would switch to its own user, which cannot
            # write into the test's directory
            lines.append("user root")
        lines += self.extra
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def start(self, timeout=10.0):
        assert self.proc is None or self.proc.poll() is not None, "already running"
        logf = open(self.log, "ab")
        try:
            self.proc = subprocess.Popen([MOSQUITTO, "-c", self.conf], stdout=logf,
                                         stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        finally:
            logf.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("mosquitto exited: " + self.log_text())
            # a plain TCP connect works for the TLS listener too
            if wait_port(self.port, 0.2):
                return self
        self.kill()
        raise RuntimeError("mosquitto did not listen on %d: %s" % (self.port, self.log_text()))

    def stop(self, timeout=10.0):
        """SIGTERM (mosquitto writes its persistence db), then wait."""
        p = self.proc
        if p is None or p.poll() is not None:
            return
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout)

    def kill(self):
        p = self.proc
        if p is not None and p.poll() is None:
            p.kill()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def log_text(self):
        try:
            with open(self.log, "rb") as f:
                return f.read().decode("utf-8", "replace")[-4000:]
        except OSError:
            return ""

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        self.kill()
