# umqtt3_cli -- the desktop commands around the umqtt3 library (CPython
# only; never copied to a device):
#
#     broker.py   python -m umqtt3.broker (umqtt3-broker): the broker's
#                 command line, one flag per limit, the desktop profile
#     passwd.py   python -m umqtt3_cli.passwd (umqtt3-passwd): the broker's
#                 users file
#
# They use umqtt3's public names only (tests/test_layers.py), and umqtt3
# imports them only from a `__main__` block (broker.py's).
#
# Here: command_name(), what each calls itself (the console script run, or
# `python -m ...`).
import os
import sys


def command_name(module):
    """What a command calls itself in --help and its refusals: the name the
    user ran when it is one of the console scripts pip installs
    (umqtt3-broker), else `python -m MODULE` (run as a module, whose argv[0]
    is the module's file, or main() called from other code, a test runner)."""
    ran = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if ran.startswith("umqtt3") and not ran.endswith(".py"):
        return ran
    return "python -m " + module
