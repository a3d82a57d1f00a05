# main.py -- runs after boot.py: the role from /config.json ("node" or
# "gateway"), the profile in /board.py, secrets from /secrets.json. Any error
# is printed, then the board resets after a pause (unattended devices recover
# by themselves; Ctrl-C at the REPL during the pause stops that). A bad
# /config.json or /secrets.json is printed and the board stays at the REPL:
# a reset would not mend it, so fix it there (or deploy again) and reset. So
# are a station without an ssid in /secrets.json and a store_dir (or
# gateway_store) whose parent directory is missing (config.check_board).
# A node whose config's "cycles" are done stays stopped, its watchdog fed.
import sys
import time

import config


def main():
    try:
        cfg = config.load()
    except ValueError as e:  # also JSON that does not parse
        print("/config.json: %s: not starting" % e)
        return
    board = config.board(cfg["board"])
    try:
        secrets = config.load_secrets()
    except ValueError as e:  # also JSON that does not parse
        print("/secrets.json: %s: not starting" % e)
        return
    bridges = None
    if cfg["role"] == "gateway":
        import gateway
        try:  # the bridges' files (cafile, ...) are on the board: checked here
            bridges = gateway.bridge_settings(cfg, board, secrets)
        except ValueError as e:
            print("/config.json: %s: not starting" % e)
            return
    try:  # before the role starts: no watchdog armed yet
        config.check_board(cfg, secrets)
    except ValueError as e:
        print("%s: not starting" % e)
        return
    if cfg["role"] == "gateway":
        import gateway  # (imported above: checked its bridges)
        gateway.run(cfg, board, secrets, log=print, bridges=bridges)
    else:
        import node
        n = node.Node(cfg, board, secrets, log=print)
        n.run()  # returns after the config's cycles (0: never)
        n.stay_stopped()  # an armed watchdog would reset the board into a new run


try:
    main()
except KeyboardInterrupt:
    print("stopped")
except Exception as e:
    sys.print_exception(e) if hasattr(sys, "print_exception") else print(repr(e))
    time.sleep(10)
    import machine
    machine.reset()
