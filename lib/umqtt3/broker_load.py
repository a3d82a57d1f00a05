# umqtt3.broker_load -- $SYS/broker/load/...: mosquitto's moving averages.
#
#     update(core, pub)      # at each $SYS update (Core._sys)
#
# Each figure is a rate per minute, averaged over 1, 5 and 15 minutes as
# mosquitto 2.0 does (mosquitto(8), BROKER STATUS): at each update, dt
# whole seconds after the last, rate = (count now - count then) * 60 / dt
# and avg = rate + exp(-dt / T) * (avg - rate) for T = 60, 300, 900 s. The
# first update publishes 0.00 everywhere; later ones publish an average
# (as "%.2f") only when it moved by 0.01 or more, as mosquitto's. Loaded by
# the first $SYS update at which a session subscribes to a $SYS/ filter or a
# bridge takes $SYS/broker/load/ up (Core._sys): a broker with sys_interval
# 0, or one that nobody watches (a gateway, say), never imports it.

E = 2.718281828459045  # e: exp(x) as E ** x, without importing math

# the topics under load/, in the order of the counts that counts() gives
NAMES = ("messages/received", "messages/sent", "publish/received", "publish/sent",
         "bytes/received", "bytes/sent", "connections", "sockets")
SPANS = (("1min", 60), ("5min", 300), ("15min", 900))


def counts(core):
    """The running totals the averages follow, in NAMES' order."""
    t = core.total
    return (t("received") + t("others_in"), t("sent") + t("others_out"), t("received"),
            t("sent"), t("bytes_in"), t("bytes_out"), core.connects, core.sockets)


def update(core, pub):
    """One $SYS update: move the averages on to core's counts now and
    publish what changed through pub(name, text)."""
    now = counts(core)
    st = core.load
    if st is None:
        # [the time, the counts, then an average per name and span]
        core.load = [core.up_s, now, [0.0] * (len(NAMES) * len(SPANS))]
        for n in NAMES:
            for s in SPANS:
                pub("load/%s/%s" % (n, s[0]), "0.00")
        return
    dt = core.up_s - st[0]
    if dt <= 0:
        return  # (mosquitto counts whole seconds too)
    was = st[1]
    avg = st[2]
    k = 0
    for i in range(len(NAMES)):
        rate = (now[i] - was[i]) * 60.0 / dt
        for s in SPANS:
            old = avg[k]
            new = rate + E ** (-dt / s[1]) * (old - rate)
            avg[k] = new
            if abs(new - old) >= 0.01:
                pub("load/%s/%s" % (NAMES[i], s[0]), "%.2f" % new)
            k += 1
    st[0] = core.up_s
    st[1] = now
