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
