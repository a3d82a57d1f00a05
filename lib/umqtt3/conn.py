# umqtt3.conn -- one framed, non-blocking MQTT connection over a stream:
# Conn and Closed, which live in umqtt3.client_codec (a client loads one
# module for the wire, not two); the broker and its tests import them here.
from .client_codec import Conn, Closed  # noqa: F401
