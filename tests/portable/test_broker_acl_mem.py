# A subscription a deny rule of the ACL meets is checked per message
# (broker_subs.ACL_CHECK, broker_acl.Grants.may_receive), and that check
# allocates nothing: the forwarding of test_broker_mem under heap_lock
# (MicroPython), through such a subscription.
#     node tests/mp/run.mjs tests/mp/testrunner.py test_broker_acl_mem
import test_broker_mem as m
from umqtt3.broker_subs import ACL_CHECK

ACL = "topic readwrite #\ntopic deny sensors/secret/#\n"


def _steady(qos):
    orig = m._broker

    def with_acl(**kw):
        b = orig(**kw)
        b.set_acl(ACL)
        return b

    m._broker = with_acl
    try:
        st = m._Steady(qos)
    finally:
        m._broker = orig
    # "sensors/+/temp" meets "sensors/secret/#": granted, checked per message
    assert st.b.sessions()[b"sub"].fqos[0] & ACL_CHECK
    return st


def test_checked_forward_qos0_allocates_nothing():
    m._check_zero_alloc(0, _steady(0))


def test_checked_forward_qos1_allocates_nothing():
    m._check_zero_alloc(1, _steady(1))
