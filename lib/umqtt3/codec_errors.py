# umqtt3.codec_errors -- why the codec refused a packet, as text.
#
# codec.py, codec_server.py and props.py raise with a number (their _E_
# constants), and codec.fail() imports this module to turn it into
# MQTTError.reason: the texts cost a device no RAM until the first refusal.
# Keep the order: the constants are indexes into TEXT.
TEXT = (
    "remaining length too large",  # 0 _E_LENGTH_TOO_LARGE
    "remaining length not minimal",  # 1 _E_LENGTH_NOT_MINIMAL
    "packet larger than maximum",  # 2 _E_OVER_MAXIMUM
    "remaining length over 4 bytes",  # 3 _E_LENGTH_OVER_4
    "remaining length disagrees with the data",  # 4 _E_LENGTH_DISAGREES
    "buffer too small",  # 5 _E_BUFFER
    "string longer than 65535 bytes",  # 6 _E_STRING_TOO_LONG
    "invalid topic filter",  # 7 _E_FILTER
    "bad subscription options",  # 8 _E_SUB_OPTIONS
    "packet id must be 1..65535",  # 9 _E_PID_RANGE
    "bad level",  # 10 _E_LEVEL
    "empty client id",  # 11 _E_EMPTY_ID
    "will QoS 3",  # 12 _E_WILL_QOS
    "password without user name",  # 13 _E_PASSWORD
    "keepalive out of range",  # 14 _E_KEEPALIVE
    "QoS 3",  # 15 _E_QOS
    "invalid topic name",  # 16 _E_TOPIC
    "SUBSCRIBE with no filters",  # 17 _E_SUB_NO_FILTERS
    "UNSUBSCRIBE with no filters",  # 18 _E_UNSUB_NO_FILTERS
    "truncated string",  # 19 _E_STRING_TRUNCATED
    "string runs past the packet",  # 20 _E_STRING_PAST_END
    "ill-formed UTF-8 or U+0000",  # 21 _E_UTF8
    "truncated binary field",  # 22 _E_BINARY_TRUNCATED
    "binary field runs past the packet",  # 23 _E_BINARY_PAST_END
    "truncated",  # 24 _E_TRUNCATED
    "packet id 0",  # 25 _E_PID_0
    "reserved packet type",  # 26 _E_RESERVED_TYPE
    "reserved flags",  # 27 _E_RESERVED_FLAGS
    "bad length",  # 28 _E_LENGTH
    "CONNACK reserved bits",  # 29 _E_CONNACK_BITS
    "no return codes",  # 30 _E_NO_CODES
    "bad return code",  # 31 _E_RETURN_CODE
    "DUP set on QoS 0",  # 32 _E_DUP_QOS0
    "wildcard in topic name",  # 33 _E_WILDCARD
    "empty topic name",  # 34 _E_EMPTY_TOPIC
    "no topic filters",  # 35 _E_NO_FILTERS
    "missing subscription options",  # 36 _E_NO_OPTIONS
    "truncated CONNECT",  # 37 _E_CONNECT_TRUNCATED
    "unknown protocol name",  # 38 _E_PROTOCOL_NAME
    "unsupported protocol level",  # 39 _E_PROTOCOL_LEVEL
    "CONNECT reserved flag",  # 40 _E_CONNECT_FLAG
    "will QoS/retain without will",  # 41 _E_WILL_FLAGS
    "empty will topic",  # 42 _E_EMPTY_WILL
    "wildcard in will topic",  # 43 _E_WILL_WILDCARD
    "bytes after CONNECT payload",  # 44 _E_CONNECT_TAIL
    "bad variable byte integer",  # 45 _E_VARINT
    "variable byte integer not minimal",  # 46 _E_VARINT_NOT_MINIMAL
    "properties run past the packet",  # 47 _E_PROPS_PAST_END
    "property runs past the list",  # 48 _E_PROP_PAST_LIST
    "property list length",  # 49 _E_PROP_LIST_LENGTH
    "unknown property",  # 50 _E_PROP_UNKNOWN
    "property not allowed in this packet",  # 51 _E_PROP_NOT_ALLOWED
    "duplicate property",  # 52 _E_PROP_DUPLICATE
    "property value must be 0 or 1",  # 53 _E_PROP_NOT_0_1
    "Maximum QoS must be 0 or 1",  # 54 _E_PROP_MAX_QOS
    "property value 0",  # 55 _E_PROP_ZERO
    "Maximum Packet Size 0",  # 56 _E_PROP_MAX_PACKET_0
    "Subscription Identifier 0",  # 57 _E_PROP_SUB_ID_0
    "string too long",  # 58 _E_PROP_STRING_LONG
    "bad property value",  # 59 _E_PROP_VALUE
    "bad reason code",  # 60 _E_REASON_CODE
    "bridge bit at MQTT 5",  # 61 _E_BRIDGE_5
)
