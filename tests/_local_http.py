"""Helpers for the local HTTP servers the CLI starts (serve, explore) and their tests."""

import http.client
import socket
import time


def free_port(host="127.0.0.1"):
    """A TCP port on `host` that nothing listens on at the moment of the call."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def wait_for_http(port, path="/", process=None, timeout=180, host="127.0.0.1"):
    """Poll `GET path` on `host:port` until it answers 200.

    Raises `RuntimeError` when `process` (a `subprocess.Popen`) exits first or
    `timeout` seconds pass.
    """
    deadline = time.time() + timeout
    while True:
        try:
            connection = http.client.HTTPConnection(host, port, timeout=5)
            try:
                connection.request("GET", path)
                if connection.getresponse().status == 200:
                    return
            finally:
                connection.close()
        except OSError:
            pass
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server exited with status {process.returncode}")
        if time.time() > deadline:
            raise RuntimeError(f"the server did not answer GET {path} within {timeout} s")
        time.sleep(0.5)
