"""The uvicorn internals keras-capsules uses (its h11 protocol) are there, or fail by name."""

import importlib
import re
import socket
import threading
import time

import pytest

uvicorn = pytest.importorskip("uvicorn")

from keras_capsules._compat import InternalChanged  # noqa: E402
from keras_capsules._compat import uvicorn as compat  # noqa: E402
from tests._local_http import free_port  # noqa: E402

h11_impl = importlib.import_module("uvicorn.protocols.http.h11_impl")


def test_uvicorns_internals_are_there():
    compat.check()


@pytest.mark.parametrize("name", ["pause_writing", "data_received"])
def test_a_missing_method_is_named_with_uvicorns_version(monkeypatch, name):
    monkeypatch.delattr(h11_impl.H11Protocol, name)
    version = re.escape(uvicorn.__version__)
    with pytest.raises(InternalChanged, match=rf"H11Protocol\.{name}.*uvicorn {version}"):
        compat.check()


def test_a_missing_attribute_is_named(monkeypatch):
    original = h11_impl.H11Protocol.__init__

    def without_conn(self, *args, **kwargs):
        original(self, *args, **kwargs)
        del self.conn

    monkeypatch.setattr(h11_impl.H11Protocol, "__init__", without_conn)
    with pytest.raises(InternalChanged, match="H11Protocol's attribute conn"):
        compat.check()


@pytest.fixture
def timed_server():
    """A uvicorn server with the timed protocol (a 0.5 s deadline): its port."""

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, http=compat.timed_h11_protocol(0.5), log_level="error"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started:
        assert time.time() < deadline and thread.is_alive(), "the server did not start"
        time.sleep(0.05)
    yield port
    server.should_exit = True
    thread.join(timeout=10)


def test_a_request_that_trickles_in_is_cut_off_and_a_whole_one_answered(timed_server):
    slow = socket.create_connection(("127.0.0.1", timed_server), timeout=5)
    slow.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")  # the headers never end
    whole = socket.create_connection(("127.0.0.1", timed_server), timeout=5)
    whole.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert whole.recv(1024).startswith(b"HTTP/1.1 200")
    whole.close()
    started = time.time()
    assert slow.recv(1024) == b""  # closed by the server
    assert 0.1 < time.time() - started < 3
    slow.close()
