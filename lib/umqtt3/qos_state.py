# umqtt3.qos_state -- one vocabulary for where a QoS 1/2 message stands.
#
# The sending side of a message, as a broker session's in-flight ring holds
# it (one byte per slot), and as a store records it: store.py's recover()
# names a record by its state letter, the file suffix of FileStore
# ("o<seq>.p", "i<pid>.u"). to_stored() and from_stored() are the only
# translation between the two; allowed() is the transition check the tests
# run every session change through.
from .compat import const

FREE = const(0)  # no message in this slot
PUB = const(1)  # PUBLISH to write (new, or again after a reconnect)
PUB_SENT = const(2)  # PUBLISH written, waiting for PUBACK / PUBREC
REL = const(3)  # PUBREC received, PUBREL to write
REL_SENT = const(4)  # PUBREL written, waiting for PUBCOMP

# store record states (recover()'s letters, FileStore's suffixes)
STORED_PUB = "p"  # outbound, PUBLISH stored: no PUBACK / PUBREC yet
STORED_REL = "r"  # outbound, PUBREC recorded: PUBREL is due
HELD = "u"  # inbound QoS 2 id, its routing not finished
ROUTED = "d"  # inbound QoS 2 id, routed: a resend is answered only

# from-state -> states it may go to (bit per state)
_NEXT = (
    (1 << PUB) | (1 << PUB_SENT) | (1 << REL_SENT),  # FREE: sent, queued, restored
    (1 << PUB_SENT) | (1 << REL) | (1 << REL_SENT) | (1 << FREE),  # PUB
    (1 << PUB) | (1 << REL) | (1 << REL_SENT) | (1 << FREE),  # PUB_SENT
    (1 << REL_SENT) | (1 << FREE),  # REL
    (1 << REL) | (1 << FREE),  # REL_SENT: resend after reconnect, PUBCOMP
)


def allowed(a, b):
    """True when a slot may go from state a to state b."""
    return 0 <= a < 5 and 0 <= b < 5 and bool(_NEXT[a] & (1 << b))


def to_stored(st):
    """The record state a ring state is kept as."""
    return STORED_REL if st >= REL else STORED_PUB


def from_stored(letter):
    """The ring state a stored outbound record comes back in: as written,
    so that a reconnect sends it again."""
    return REL_SENT if letter == STORED_REL else PUB_SENT
