# mem_budget counts what holding a message costs: a QoS 1 message that is
# both queued (for offline sessions) and retained is counted twice, once
# per copy (the queue's Msg, Retained's own), so the broker's count never
# passes the budget (docs/broker.md, the queue section).
#
#     node tests/mp/run.mjs --heap 2m tests/mp/testrunner.py test_broker_budget_retained
from broker_harness import running, Raw, settle
from test_broker5_connect import connect5, pub5
from umqtt3.codec import PUBACK


def test_a_queued_and_retained_message_counts_both_copies_against_mem_budget():
    with running() as b:
        for i in range(16):
            c = Raw(b)
            c.connect("s%02d" % i, clean=False)
            c.subscribe(1, [("q/%02d/#" % i, 1)])
            c.close()
        settle()
        pub = Raw(b)
        connect5(pub, "pub")
        budget = b.limits.mem_budget
        refused = None
        n = 0
        while n < 2000 and refused is None:
            pub5(pub, "q/%02d/%d" % (n % 16, n), b"v", 1, n % 65535 + 1, retain=True)
            p = pub.recv()
            assert p is not None and p.type == PUBACK, p
            if p.rc:
                refused = p.rc
            else:
                n += 1
            # the broker's own count of what it holds stays within the budget
            assert b.qbytes + b.ret.nbytes <= budget, (n, b.qbytes + b.ret.nbytes, budget)
        assert refused == 0x97 and n > 16, (refused, n)  # 0x97: quota exceeded
        assert b.refused_mem == 1
