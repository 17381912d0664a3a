"""The real server (`keras-capsules serve`) on a loopback port, exercised over HTTP."""

import base64
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time

import keras
import numpy as np
import pytest

import applications
from keras_capsules import cli
from tests._local_http import free_port
from tests._local_http import wait_for_http
from tests.conftest import BACKEND

pytestmark = pytest.mark.skipif(
    BACKEND != "tensorflow", reason="serving runs the SavedModel, the TensorFlow part"
)
pytest.importorskip("kserve")

MAX_BATCH = 32
MAX_BYTES = 1_000_000
REQUEST_TIMEOUT = 2.0


class Client:
    def __init__(self, port, name):
        self.port = port
        self.name = name

    def request(self, method, path, body=None, headers=None):
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
            connection.request(method, path, body=body, headers=headers or {})
            response = connection.getresponse()
            data = response.read()
        finally:
            connection.close()
        try:
            return response.status, json.loads(data)
        except ValueError:
            return response.status, data.decode(errors="replace")

    def predict(self, body, headers=None):
        return self.request("POST", f"/v1/models/{self.name}:predict", body, headers)


@pytest.fixture(scope="module")
def served(tmp_path_factory, mnist_data):
    """A CapsNetMNIST trained briefly on real MNIST, exported and served by the CLI."""
    (x_train, y_train), (x_test, y_test) = mnist_data
    keras.utils.set_random_seed(11)
    model = applications.CapsNetMNIST(
        conv_filters=32, primary_capsule_types=8, capsule_dim=8, decoder_units=(64,)
    )
    model.fit(x_train[:2000], y_train[:2000], batch_size=50, epochs=1, verbose=0)
    root = tmp_path_factory.mktemp("serve")
    model.save(str(root / "model.keras"))
    assert cli.main(["export", str(root / "model.keras"), str(root / "capsnet")]) == 0
    port = free_port()
    log = open(root / "server.log", "w")
    process = subprocess.Popen(
        [sys.executable, "-m", "keras_capsules.cli", "serve", str(root / "capsnet")]
        + ["--port", str(port), "--max-batch-size", str(MAX_BATCH)]
        + ["--max-request-bytes", str(MAX_BYTES), "--request-timeout", str(REQUEST_TIMEOUT)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    client = Client(port, "capsnet")
    client.log_path = root / "server.log"
    try:
        wait_for_http(port, "/v1/models/capsnet", process, timeout=180)
    except RuntimeError as error:
        log.close()
        raise RuntimeError(f"{error}:\n" + (root / "server.log").read_text()) from None
    x = x_test[:64, :, :, None].astype("float32")
    yield client, model, x, y_test[:64]
    process.terminate()
    process.wait(timeout=30)
    log.close()


def test_predictions_for_real_mnist_match_the_keras_model(served):
    client, model, x, y = served
    status, body = client.predict({"instances": x[:20].tolist()})
    assert status == 200, body
    predictions = body["predictions"]
    assert len(predictions) == 20
    assert set(predictions[0]) == {"probabilities", "classes", "labels", "poses"}
    expected = model.predict(x[:20], verbose=0)
    probabilities = np.array([p["probabilities"] for p in predictions])
    np.testing.assert_allclose(probabilities, expected["probabilities"], atol=1e-5)
    np.testing.assert_allclose(
        np.array([p["poses"] for p in predictions]), expected["poses"], atol=1e-5
    )
    classes = np.array([p["classes"] for p in predictions])
    np.testing.assert_array_equal(classes, expected["probabilities"].argmax(-1))
    assert [p["labels"] for p in predictions] == [model.class_names[c] for c in classes]
    assert (classes == y[:20]).mean() >= 0.6  # trained briefly, but it does read digits


def test_columnar_inputs_and_two_dimensional_images(served):
    client, model, x, _ = served
    status, body = client.predict({"inputs": x[:3, :, :, 0].tolist()})  # (28, 28) images
    assert status == 200, body
    np.testing.assert_allclose(
        body["outputs"]["probabilities"],
        model.predict(x[:3], verbose=0)["probabilities"],
        atol=1e-5,
    )


def test_png_images_in_base64(served):
    import tensorflow as tf

    client, model, x, _ = served
    pngs = [
        {"b64": base64.b64encode(tf.io.encode_png(image.astype("uint8")).numpy()).decode()}
        for image in x[:4]
    ]
    status, body = client.predict({"instances": pngs})
    assert status == 200, body
    probabilities = np.array([p["probabilities"] for p in body["predictions"]])
    np.testing.assert_allclose(
        probabilities, model.predict(x[:4], verbose=0)["probabilities"], atol=1e-5
    )


@pytest.mark.parametrize("mode", ["RGBA", "LA"])
def test_the_alpha_of_a_png_is_dropped_as_the_models_converter_drops_it(served, mode):
    """Digits drawn in colour under any alpha read as the digits, as they do as lists."""
    import tensorflow as tf

    client, model, x, _ = served
    digits = x[:3].astype("uint8")
    alpha = np.random.default_rng(2).integers(0, 256, digits.shape).astype("uint8")
    layers = [digits, digits, digits, alpha] if mode == "RGBA" else [digits, alpha]
    images = np.concatenate(layers, -1)
    pngs = [{"b64": base64.b64encode(tf.io.encode_png(image).numpy()).decode()} for image in images]
    status, body = client.predict({"instances": pngs})
    assert status == 200, body
    probabilities = np.array([p["probabilities"] for p in body["predictions"]])
    np.testing.assert_allclose(
        probabilities, model.predict(x[:3], verbose=0)["probabilities"], atol=1e-5
    )


def test_reconstruction_signature(served):
    client, model, x, _ = served
    request = {
        "signature_name": "reconstruct_capsule",
        "instances": [{"images": x[i].tolist(), "capsules": c} for i, c in enumerate([7, 2])],
    }
    status, body = client.predict(request)
    assert status == 200, body
    np.testing.assert_allclose(
        np.array(body["predictions"]),
        model.reconstruct(x[:2], labels=np.array([7, 2])),
        atol=1e-5,
    )


def test_status_and_metadata(served):
    client, _, _, _ = served
    status, body = client.request("GET", "/v1/models/capsnet")
    assert status == 200
    assert body["model_version_status"][0]["state"] == "AVAILABLE"
    assert body["model_version_status"][0]["version"] == "1"
    status, body = client.request("GET", "/v1/models/capsnet/metadata")
    assert status == 200
    signatures = body["metadata"]["signature_def"]["signature_def"]
    assert set(signatures) == {"serving_default", "reconstruct", "reconstruct_capsule"}
    outputs = signatures["serving_default"]["outputs"]
    assert outputs["probabilities"]["tensor_shape"]["dim"][1]["size"] == "10"
    assert body["metadata"]["image_shape"] == [28, 28, 1]


# The start of a 16000x16000 16-bit RGBA PNG: its header, then no pixels. The size
# is refused from the header, before anything is decoded.
PNG_BOMB_HEADER = (
    b"\x89PNG\r\n\x1a\n"
    + (13).to_bytes(4, "big")
    + b"IHDR"
    + (16000).to_bytes(4, "big") * 2
    + bytes([16, 6, 0, 0, 0])
    + bytes(4)
)

BAD_REQUESTS = {
    "malformed JSON": (b'{"instances": [[1, 2', r"not valid JSON"),
    "not an object": (b"[1, 2, 3]", r'"instances" or "inputs"'),
    "both formats": ({"instances": [1], "inputs": [1]}, r"exactly one of"),
    "empty batch": ({"instances": []}, r"non-empty"),
    "two channels": ({"instances": np.zeros((2, 32, 32, 2)).tolist()}, r"1 or 3 or 4 channels"),
    "five channels": (
        {"instances": np.zeros((1, 28, 28, 5)).tolist()},
        r"1 or 3 or 4 channels .*received shape \(28, 28, 5\)",
    ),
    "wrong rank": ({"instances": np.zeros((2, 28)).tolist()}, r"\(height, width, channels\)"),
    "an empty image": ({"instances": np.zeros((1, 0, 28, 1)).tolist()}, r"shape \(0,\)"),
    "a ragged image": ({"instances": [[[0] * 28] * 27 + [[0] * 27]]}, r"received shape \(28,\)"),
    "strings for pixels": ({"instances": [[["a"] * 28] * 28]}, r"nested list of numbers"),
    "NaN pixels": (b'{"instances": [[[NaN]]]}', r"NaN"),
    "infinite pixels": (
        ('{"instances": [' + json.dumps([[0] * 28] * 28).replace("0", "1e999") + "]}").encode(),
        r"NaN or infinite|not valid JSON",
    ),
    "oversized batch": ({"instances": np.zeros((MAX_BATCH + 1, 28, 28)).tolist()}, r"limit"),
    "unknown signature": ({"signature_name": "nope", "instances": [1]}, r"Unknown signature"),
    "bad base64": ({"instances": [{"b64": "not base64!"}]}, r"base64-encoded PNG"),
    "numeric strings for pixels": ({"instances": [[["1"] * 28] * 28]}, r"are not pixels"),
    "booleans for pixels": ({"instances": [[[True] * 28] * 28]}, r"are not pixels"),
    "a boolean among numbers": (
        {"instances": [[[0] * 27 + [True]] + [[0] * 28] * 27]},
        r"are not pixels",
    ),
    "nulls for pixels": ({"instances": [[[None] * 28] * 28]}, r"are not pixels"),
    "a list for signature_name": (
        {"signature_name": ["serving_default"], "instances": [[[0] * 28] * 28]},
        r"signature_name.*string",
    ),
    "a PNG bomb": (
        {"instances": [{"b64": base64.b64encode(PNG_BOMB_HEADER).decode()}]},
        r"the PNG is 16000x16000; this server takes images of at most 16777216 pixels",
    ),
    "not a PNG": (
        {"instances": [{"b64": base64.b64encode(b"GIF89a" + bytes(40)).decode()}]},
        r"base64-encoded PNG",
    ),
    "capsule out of range": (
        {
            "signature_name": "reconstruct_capsule",
            "instances": [{"images": np.zeros((28, 28)).tolist(), "capsules": 10}],
        },
        r"class indices in \[0, 10\)",
    ),
}


PARSE_ERRORS = {"malformed JSON", "NaN pixels", "infinite pixels"}


def test_photos_of_any_size_and_colour_are_answered_as_the_model_answers_them(served):
    import tensorflow as tf

    client, model, _, _ = served
    rng = np.random.default_rng(8)
    photos = [rng.integers(0, 256, shape).astype("uint8") for shape in ((40, 31, 3), (28, 28, 4))]
    pngs = [{"b64": base64.b64encode(tf.io.encode_png(p).numpy()).decode()} for p in photos]
    status, body = client.predict({"instances": [*pngs, photos[0].tolist()]})  # sizes mixed
    assert status == 200, body
    expected = [
        model.predict(photos[0][None], verbose=0)["probabilities"][0],
        model.predict(photos[1][None], verbose=0)["probabilities"][0],  # RGBA, as Keras takes it
        model.predict(photos[0][None], verbose=0)["probabilities"][0],
    ]
    served_probabilities = np.array([p["probabilities"] for p in body["predictions"]])
    np.testing.assert_allclose(served_probabilities, np.array(expected), atol=1e-4)


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
def test_bad_requests_get_a_400_and_the_server_keeps_serving(served, case, content_type):
    """Also as curl sends them by default (form content type), as TF Serving allows."""
    client, _, x, _ = served
    body, message = BAD_REQUESTS[case]
    status, answer = client.predict(body, {"Content-Type": content_type})
    assert status == 400, (status, answer)
    assert isinstance(answer, dict) and answer["error"], answer
    if content_type == "application/json" and case in PARSE_ERRORS:
        message = "Unrecognized request format"  # KServe parses JSON bodies itself
    assert re.search(message, answer["error"]), answer["error"]
    assert client.predict({"instances": x[:1].tolist()})[0] == 200


@pytest.mark.parametrize(
    "method, path",
    [
        ("POST", "/v2/repository/models/capsnet/unload"),
        ("POST", "/v2/repository/models/capsnet/load"),
        ("POST", "/v2/repository/index"),
        ("DELETE", "/v1/models/capsnet"),
        ("PUT", "/v1/models/capsnet:predict"),
    ],
)
def test_nothing_changes_the_servers_state(served, method, path):
    client, _, x, _ = served
    status, answer = client.request(method, path, b"{}", {"Content-Type": "application/json"})
    assert status == 405, (status, answer)
    assert client.request("GET", "/v2/health/ready")[0] == 200
    assert client.request("GET", "/v1/models/capsnet")[1]["model_version_status"][0]["state"] == (
        "AVAILABLE"
    )
    assert client.predict({"instances": x[:1].tolist()})[0] == 200


def test_a_bad_request_is_logged_in_one_line(served):
    client, _, _, _ = served
    before = client.log_path.read_text()
    assert client.predict({"instances": [[["x"] * 28] * 28]})[0] == 400
    deadline = time.time() + 10
    while client.log_path.read_text() == before and time.time() < deadline:
        time.sleep(0.05)
    added = client.log_path.read_text()[len(before) :]
    assert re.search(r"400 POST /v1/models/capsnet:predict: .*nested list of numbers", added), added
    assert "Traceback" not in added


def test_requests_for_unknown_models_are_404s_logged_in_one_line_each(served):
    client, _, _, _ = served
    before = client.log_path.read_text()
    for _ in range(20):
        status, _ = client.request("GET", "/v1/models/no-such-model")
        assert status == 404
    deadline = time.time() + 10
    while client.log_path.read_text().count("404 GET") - before.count("404 GET") < 20:
        assert time.time() < deadline, client.log_path.read_text()[len(before) :]
        time.sleep(0.05)
    added = client.log_path.read_text()[len(before) :]
    assert len(re.findall(r"404 GET /v1/models/no-such-model: ", added)) == 20, added
    assert "Traceback" not in added and len(added) < 20 * 300, added


def test_unexpected_errors_are_a_500_that_closes_the_connection_cleanly():
    import asyncio

    from keras_capsules.serving.server import _CleanServerErrors

    async def broken(scope, receive, send):
        raise TypeError("a bug")

    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/models/m:predict"}
    asyncio.run(_CleanServerErrors(broken)(scope, None, send))
    start, body = sent
    assert start["status"] == 500 and (b"connection", b"close") in start["headers"]
    assert json.loads(body["body"]) == {"error": "Internal server error: TypeError"}


def test_a_client_that_disconnects_is_logged_in_one_line(caplog):
    import asyncio

    from starlette.requests import ClientDisconnect

    from keras_capsules.serving.server import _CleanServerErrors

    async def reading(scope, receive, send):
        raise ClientDisconnect()  # what Starlette raises reading a body whose client went

    sent = []

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/models/m:predict"}
    with caplog.at_level("WARNING", logger="keras_capsules.serving"):
        asyncio.run(_CleanServerErrors(reading)(scope, None, send))
    assert not sent  # no one to answer
    (record,) = caplog.records
    assert record.getMessage() == (
        "POST /v1/models/m:predict: the client disconnected before its request was in; "
        "nothing was answered"
    )
    assert record.exc_info is None


def test_clients_that_disconnect_mid_request_are_logged_in_one_line_each(served):
    client, _, x, _ = served
    body = json.dumps({"instances": x[:1].tolist()}).encode()
    head = (
        "POST /v1/models/capsnet:predict HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    message = (
        "POST /v1/models/capsnet:predict: the client disconnected before its request was in; "
        "nothing was answered"
    )
    before = client.log_path.read_text()
    for _ in range(3):  # half the body, then gone
        connection = socket.create_connection(("127.0.0.1", client.port), timeout=10)
        connection.sendall(head + body[: len(body) // 2])
        time.sleep(0.2)
        connection.close()
    deadline = time.time() + 10
    while client.log_path.read_text()[len(before) :].count(message) < 3:
        assert time.time() < deadline, client.log_path.read_text()[len(before) :]
        time.sleep(0.05)
    time.sleep(0.2)  # anything else the server would log about them
    added = client.log_path.read_text()[len(before) :]
    assert added.count(message) == 3 and len(added) < 3 * 300, added
    assert "Traceback" not in added and "Unexpected error" not in added, added
    assert client.predict({"instances": x[:1].tolist()})[0] == 200


def test_oversized_bodies_get_a_413(served):
    client, _, x, _ = served
    status, answer = client.predict(b" " * (MAX_BYTES + 1))
    assert status == 413 and "limit" in answer["error"]
    assert client.predict({"instances": x[:1].tolist()})[0] == 200


def test_binds_loopback_only(served):
    client, _, _, _ = served
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.254.254.254", 1))  # no packet is sent
            address = probe.getsockname()[0]
        except OSError:
            address = None
    if address is None or address.startswith("127."):
        pytest.skip("this machine has no non-loopback address to try")
    with pytest.raises(OSError):
        socket.create_connection((address, client.port), timeout=5).close()


def test_slow_clients_are_cut_off_and_good_ones_keep_being_served(served):
    """A slowloris: 100 connections that trickle their headers, 20 their body."""
    client, model, x, _ = served
    slow = []
    for i in range(120):
        connection = socket.create_connection(("127.0.0.1", client.port), timeout=10)
        head = "POST /v1/models/capsnet:predict HTTP/1.1\r\nHost: x\r\n"
        if i >= 100:  # complete headers, then a body that never comes
            head += "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
        connection.sendall(head.encode())
        slow.append(connection)
    started = time.time()
    expected = model.predict(x[:1], verbose=0)["probabilities"].argmax(-1)[0]
    while time.time() - started < REQUEST_TIMEOUT:  # served while the slow ones hang
        status, answer = client.predict({"instances": x[:1].tolist()})
        assert status == 200 and answer["predictions"][0]["classes"] == expected, answer
    time.sleep(1.5)
    for connection in slow:  # every slow connection was closed by the server
        try:
            assert connection.recv(1024) == b""
        except ConnectionResetError:
            pass
        connection.close()
    assert client.predict({"instances": x[:1].tolist()})[0] == 200


def test_clients_that_never_read_their_answer_are_cut_off(served):
    """3 clients ask for 20 batches of reconstructions at once (some 10 MB) and read none."""
    client, model, x, _ = served
    payload = {"signature_name": "reconstruct", "instances": x[:MAX_BATCH].tolist()}
    body = json.dumps(payload).encode()
    request = (
        "POST /v1/models/capsnet:predict HTTP/1.1\r\nHost: x\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    readers = []
    for _ in range(3):
        connection = socket.socket()
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        connection.settimeout(10)
        connection.connect(("127.0.0.1", client.port))
        connection.sendall(request * 20)  # pipelined
        readers.append(connection)
    before = client.log_path.read_text().count("read none of its answer")
    deadline = time.time() + 60
    expected = model.predict(x[:1], verbose=0)["probabilities"].argmax(-1)[0]
    while client.log_path.read_text().count("read none of its answer") - before < 3:
        assert time.time() < deadline, client.log_path.read_text()[-2000:]
        status, answer = client.predict({"instances": x[:1].tolist()})  # served meanwhile
        assert status == 200 and answer["predictions"][0]["classes"] == expected, answer
        time.sleep(0.2)
    for connection in readers:  # aborted: what was sent, then a reset or the end
        received = 0
        try:
            while chunk := connection.recv(1 << 20):
                received += len(chunk)
        except ConnectionResetError:
            pass
        assert received < 20 * MAX_BATCH * 28 * 28 * 4  # not every answer
        connection.close()


def test_load_eight_clients(served, record_property):
    """8 clients for 30 s, 30% of their requests bad (a PNG bomb among them).

    No 5xx, every good answer right, every bad one a 400; latencies recorded.
    """
    client, model, x, _ = served
    expected = model.predict(x[:8], verbose=0)["probabilities"].argmax(-1)
    bodies = [json.dumps({"instances": x[i : i + 1].tolist()}).encode() for i in range(8)]
    bad = [body for body, _ in BAD_REQUESTS.values() if not isinstance(body, bytes)]
    bad = [json.dumps(body).encode() for body in bad]
    latencies, failures = [], []
    stop = time.time() + 30

    def run(i):
        rng = np.random.default_rng(i)
        while time.time() < stop:
            if rng.uniform() < 0.3:
                status, answer = client.predict(bad[rng.integers(len(bad))])
                if status != 400:
                    failures.append((status, str(answer)[:200]))
                continue
            start = time.perf_counter()
            status, answer = client.predict(bodies[i])
            latencies.append(time.perf_counter() - start)
            if status != 200 or answer["predictions"][0]["classes"] != expected[i]:
                failures.append((status, str(answer)[:200]))

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    p50, p90, p99 = np.percentile(np.array(latencies) * 1000, [50, 90, 99])
    summary = {
        "requests": len(latencies),
        "requests_per_s": len(latencies) / 30,
        "p50_ms": p50,
        "p90_ms": p90,
        "p99_ms": p99,
    }
    record_property("load_test", json.dumps(summary))
    print("load test:", json.dumps(summary))
    assert not failures, failures[:5]
    assert len(latencies) >= 30, summary
