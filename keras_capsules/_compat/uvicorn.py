"""uvicorn's internals: its HTTP/1.1 protocol, subclassed to time out slow clients.

uvicorn takes the class of its HTTP protocol as `Config(http=...)` but has no
public base class for one: `timed_h11_protocol` subclasses its h11 protocol
and uses the members of it listed here; `check()` makes sure each is there.
"""

from keras_capsules._compat import changed
from keras_capsules._compat import internal

_LIBRARY = "uvicorn"

# The methods of uvicorn's protocol that the subclass extends, and its attributes it reads.
_METHODS = (
    "connection_made",
    "data_received",
    "connection_lost",
    "pause_writing",
    "resume_writing",
)
_ATTRIBUTES = ("conn", "loop", "logger", "transport")


def _h11_protocol():
    return internal(_LIBRARY, "uvicorn.protocols.http.h11_impl", "H11Protocol")


def timed_h11_protocol(request_timeout):
    """uvicorn's HTTP/1.1 protocol, closing connections whose request is not in on time.

    uvicorn times out idle keep-alive connections but not a request that
    trickles in: a client that sends its headers or body a byte at a time
    holds its connection forever, and enough of them exhaust the server. Here
    a request must arrive whole (headers and body) within `request_timeout`
    seconds of its first byte (of the connection, for the first request);
    otherwise the connection is closed. Answering takes as long as it takes,
    but a client must read it: when an answer fills the connection's send
    buffer and the client reads none of it for `request_timeout` seconds, the
    connection is aborted, which frees the buffered answer and the
    connection's place under `--max-connections`.

    Returns:
        The protocol class, for uvicorn's `Config(http=...)`.
    """
    import h11

    class TimedH11Protocol(_RequestDeadline, _ReadDeadline, _h11_protocol()):
        _request_timeout = request_timeout
        _arriving = (h11.IDLE, h11.SEND_BODY)  # the client's states while its request comes in

    return TimedH11Protocol


class _RequestDeadline:
    """Protocol mixin closing a connection whose request is not in `_request_timeout` s."""

    _request_timer = None

    def connection_made(self, transport):
        super().connection_made(transport)
        self._arm()

    def data_received(self, data):
        if self._request_timer is None:
            self._arm()
        super().data_received(data)
        if self.conn.their_state not in self._arriving:
            self._disarm()  # the request is in (or the connection is over)

    def connection_lost(self, exc):
        self._disarm()
        super().connection_lost(exc)

    def _arm(self):
        self._disarm()
        self._request_timer = self.loop.call_later(self._request_timeout, self._too_slow)

    def _disarm(self):
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None

    def _too_slow(self):
        self._request_timer = None
        if self.conn.their_state in self._arriving and not self.transport.is_closing():
            self.logger.warning(
                "Closed a connection whose request took over %s s to arrive",
                self._request_timeout,
            )
            self.transport.close()


class _ReadDeadline:
    """Protocol mixin aborting a connection whose client reads none of a full send buffer."""

    _send_timer = None

    def connection_lost(self, exc):
        self._stop_send_timer()
        super().connection_lost(exc)

    def pause_writing(self):  # the send buffer is full: the client must read
        super().pause_writing()
        if self._send_timer is None:
            self._send_timer = self.loop.call_later(self._request_timeout, self._not_reading)

    def resume_writing(self):
        self._stop_send_timer()
        super().resume_writing()

    def _stop_send_timer(self):
        if self._send_timer is not None:
            self._send_timer.cancel()
            self._send_timer = None

    def _not_reading(self):
        self._send_timer = None
        if not self.transport.is_closing():
            self.logger.warning(
                "Aborted a connection whose client read none of its answer for %s s",
                self._request_timeout,
            )
            self.transport.abort()  # drops the buffered answer at once


def check():
    """Make sure the uvicorn internals that keras-capsules uses are there.

    Raises:
        InternalChanged: one is gone; the message names it and uvicorn's version.
    """
    import asyncio

    import uvicorn
    from uvicorn.server import ServerState

    protocol_class = _h11_protocol()
    for name in _METHODS:  # uvicorn's own, not asyncio's do-nothing ones
        method = getattr(protocol_class, name, None)
        if not callable(method) or method is getattr(asyncio.Protocol, name, None):
            raise changed(_LIBRARY, f"H11Protocol.{name}")

    async def app(scope, receive, send):
        pass

    config = uvicorn.Config(app, http=protocol_class, log_config=None)
    loop = asyncio.new_event_loop()
    try:  # as uvicorn's server makes one for each connection
        protocol = protocol_class(
            config=config, server_state=ServerState(), app_state={}, _loop=loop
        )
    except TypeError as error:
        name = "H11Protocol(config, server_state, app_state, _loop)"
        raise changed(_LIBRARY, name, error) from error
    finally:
        loop.close()
    for name in _ATTRIBUTES:
        if not hasattr(protocol, name):
            raise changed(_LIBRARY, f"H11Protocol's attribute {name}")
