"""The command lines' shared parts: --help that shows the defaults, and a
refused command line in one line (``umqtt3-pipeline: what was wrong``, exit
status 2), never argparse's usage block."""
import argparse


class Help(argparse.RawDescriptionHelpFormatter):
    """The description as written; "(default: ...)" where a default says
    something."""

    def _get_help_string(self, action):
        h, d = action.help or "", action.default
        if "default" in h or d in (None, False, "", argparse.SUPPRESS):
            return h
        return h + " (default: %(default)s)"


class Parser(argparse.ArgumentParser):
    """One line for a refused command line, exit status 2."""

    def error(self, message):
        self.exit(2, "umqtt3-pipeline: %s\n" % message)
