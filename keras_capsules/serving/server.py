"""`serve`: run KServe's model server on an exported capsule network."""

import sys

DEFAULT_PORT = 8501
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024
DEFAULT_REQUEST_TIMEOUT = 10.0
DEFAULT_MAX_CONNECTIONS = 4096


class RequestSizeLimit:
    """ASGI middleware answering 413 to request bodies over `max_bytes`.

    It checks `Content-Length` first and also counts the bytes of bodies sent
    without one (chunked), so no request can make the server hold more.
    """

    def __init__(self, app, max_bytes):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            return await self._reject(send)
        received = 0
        started = False

        async def counting_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge()
            return message

        async def tracking_send(message):
            nonlocal started
            started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._reject(send)

    async def _reject(self, send):
        await _send_error(send, 413, f"Request body is over the limit of {self.max_bytes} bytes")


class _TooLarge(Exception):
    pass


class ReadOnlyEndpoints:
    """ASGI middleware that lets through reads and predictions, nothing else.

    `GET` and `HEAD` requests (status, metadata, health) pass, and `POST` to
    `predict_path`; every other request gets a 405 before it reaches KServe, so
    no client can change the server's state (KServe's model repository API
    would let anyone unload the model while the health check stays green).
    """

    def __init__(self, app, predict_path):
        self.app = app
        self.predict_path = predict_path

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD"):
            return await self.app(scope, receive, send)
        if scope["method"] == "POST" and scope["path"] == self.predict_path:
            return await self.app(scope, receive, send)
        message = "Method not allowed: this server only answers GET and predictions"
        await _send_error(send, 405, message, [(b"allow", b"GET, HEAD")])


class _CleanServerErrors:
    """ASGI middleware that turns an unexpected error into a 500 that closes cleanly.

    Starlette answers an unhandled exception and then raises it again, and
    uvicorn drops the keep-alive connection without `Connection: close`, so a
    client's next request on it fails. Here the error is logged once and
    answered with a 500 that says `Connection: close`, and nothing is raised.
    A client that disconnects before its request is in is no error of the
    server's: it is logged in one line, and there is no one to answer.
    """

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracking_send(message):
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as error:
            if _client_disconnected(error):
                _logger().warning(
                    "%s %s: the client disconnected before its request was in; nothing was "
                    "answered",
                    scope["method"],
                    scope["path"],
                )
                return
            _logger().exception("Unexpected error answering %s %s", scope["method"], scope["path"])
            if started:
                raise  # too late for an answer: the server closes the connection
            message = f"Internal server error: {type(error).__name__}"
            await _send_error(send, 500, message, [(b"connection", b"close")])


def _client_disconnected(error):
    """Whether `error` is Starlette's word that the client went while its request was read."""
    from starlette.requests import ClientDisconnect

    return isinstance(error, ClientDisconnect)


async def _send_error(send, status, message, headers=()):
    """Answer an ASGI request with `status` and TF Serving's `{"error": message}`."""
    import json

    body = json.dumps({"error": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _logger():
    import logging

    return logging.getLogger("keras_capsules.serving")


def _one_line(status):
    """A KServe error handler answering `status`, logging one line instead of a traceback."""

    async def handler(request, error):
        from starlette.responses import JSONResponse

        _logger().warning("%d %s %s: %s", status, request.method, request.url.path, error)
        return JSONResponse({"error": str(error)}, status_code=status)

    return handler


def _import_kserve():
    # kserve.model_server parses sys.argv when imported; keep ours away from it.
    argv, sys.argv = sys.argv, sys.argv[:1]
    try:
        import kserve
        import kserve.model_server
        from kserve.protocol.rest.server import RESTServer
    except ImportError as error:
        raise ImportError(
            "Serving needs KServe's model server: pip install 'keras-capsules[serve]'"
        ) from error
    finally:
        sys.argv = argv
    return kserve, kserve.model_server, RESTServer


def build_server(
    model_dir,
    port=DEFAULT_PORT,
    host="127.0.0.1",
    model_name=None,
    max_batch_size=256,
    max_request_bytes=DEFAULT_MAX_REQUEST_BYTES,
    request_timeout=DEFAULT_REQUEST_TIMEOUT,
    max_connections=DEFAULT_MAX_CONNECTIONS,
    check_range=True,
):
    """Load an exported model into KServe's REST server, ready to `run()`.

    Returns the `kserve.protocol.rest.server.RESTServer`; see `serve`.
    """
    import os

    from fastapi.responses import ORJSONResponse

    kserve, model_server, RESTServer = _import_kserve()

    from keras_capsules.serving.saved_model_predictor import SavedModelPredictor

    _check_server_arguments(port, max_request_bytes, request_timeout, max_connections)
    name = model_name or os.path.basename(os.path.normpath(model_dir))
    predictor = SavedModelPredictor(
        name, model_dir, max_batch_size=max_batch_size, check_range=check_range
    )
    predictor.load()

    server = kserve.ModelServer(http_port=port, enable_grpc=False, workers=1)
    server.register_model(predictor)
    app = model_server.app

    async def status():
        return ORJSONResponse(predictor.status())

    async def metadata():
        return ORJSONResponse(predictor.metadata())

    # Added before KServe's own routes, so TF Serving clients get its answers
    # (which keep KServe's `name` and `ready` fields).
    app.add_api_route(f"/v1/models/{name}", status, methods=["GET"])
    app.add_api_route(f"/v1/models/{name}/metadata", metadata, methods=["GET"])
    app.add_middleware(RequestSizeLimit, max_bytes=max_request_bytes)
    app.add_middleware(ReadOnlyEndpoints, predict_path=f"/v1/models/{name}:predict")
    app.add_middleware(_CleanServerErrors)  # added last: outermost of ours

    rest = _rest_server(RESTServer, server, app, port, host, request_timeout, max_connections)
    rest.predictor = predictor
    return rest


def _check_server_arguments(port, max_request_bytes, request_timeout, max_connections):
    """Refuse a bad port or a non-positive limit."""
    from keras_capsules._validation import check_positive
    from keras_capsules._validation import check_positive_int

    if not isinstance(port, int) or not 0 <= port < 65536:
        raise ValueError(f"`port` must be an integer in [0, 65535]. Received: port={port!r}")
    check_positive_int("max_request_bytes", max_request_bytes)
    check_positive("request_timeout", request_timeout)
    check_positive_int("max_connections", max_connections)


def _rest_server(rest_server_class, server, app, port, host, request_timeout, max_connections):
    """KServe's REST server for `server`, with our host, limits and one-line error logs."""
    from kserve.errors import InvalidInput
    from kserve.errors import ModelNotFound

    from keras_capsules._compat import uvicorn as uvicorn_compat

    class RESTServer(rest_server_class):
        def create_application(self):  # run by `run()`: KServe's routes and error handlers
            super().create_application()
            app.add_exception_handler(InvalidInput, _one_line(400))  # in place of KServe's
            app.add_exception_handler(ModelNotFound, _one_line(404))

    rest = RESTServer(
        "kserve.model_server:app",
        server.dataplane,
        server.model_repository_extension,
        port,
        workers=1,
    )
    rest.config.host = host  # KServe binds every interface; we bind what we are told
    rest.config.http = uvicorn_compat.timed_h11_protocol(float(request_timeout))
    rest.config.limit_concurrency = max_connections  # beyond it: 503
    return rest


def serve(
    model_dir,
    port=DEFAULT_PORT,
    host="127.0.0.1",
    model_name=None,
    max_batch_size=256,
    max_request_bytes=DEFAULT_MAX_REQUEST_BYTES,
    request_timeout=DEFAULT_REQUEST_TIMEOUT,
    max_connections=DEFAULT_MAX_CONNECTIONS,
    check_range=True,
):
    """Serve an exported model over HTTP with TF Serving's REST API, until stopped.

    The model server is KServe's (`pip install "keras-capsules[serve]"`).
    Endpoints, with `<name>` the model name:

    - `POST /v1/models/<name>:predict`: `{"instances": [...]}` or
      `{"inputs": ...}`, optional `"signature_name"`;
    - `GET /v1/models/<name>`: model status; `GET /v1/models/<name>/metadata`:
      the signatures; `GET /v2/health/ready` and KServe's other `GET` endpoints.

    Nothing else: every other request (KServe's model repository API, which
    loads and unloads models, included) is answered 405.

    Args:
        model_dir: directory written by `export_saved_model` (its highest
            version is served) or a SavedModel.
        port: TCP port (8501, TF Serving's REST port).
        host: interface to bind; `127.0.0.1` keeps the server local, and
            `0.0.0.0` exposes it to the network.
        model_name: the `<name>` in the URLs; the folder name by default.
        max_batch_size: the most images one request may carry (256).
        max_request_bytes: larger request bodies get a 413 answer (16 MiB).
        request_timeout: seconds a request may take to arrive, headers and
            body, before its connection is closed (10); idle keep-alive
            connections are closed after 5 s.
        max_connections: open connections beyond which requests get a 503
            (4096).
        check_range: answer pixels outside the model's declared input range
            (by more than 1% of it) with a 400 naming the range (`True`).

    Example:

    >>> from keras_capsules.serving import serve
    >>> serve("models/capsnet", port=8501)  # doctest: +SKIP
    """
    rest = build_server(
        model_dir,
        port,
        host,
        model_name,
        max_batch_size,
        max_request_bytes,
        request_timeout,
        max_connections,
        check_range,
    )
    print(
        f"Serving {rest.predictor.name!r} (version {rest.predictor.version}) at "
        f"http://{host}:{rest.config.port}/v1/models/{rest.predictor.name}:predict",
        flush=True,
    )
    rest.run()
