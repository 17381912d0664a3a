"""Benchmark `keras-capsules serve`: requests/s and latency percentiles over HTTP.

Exports CapsNetMNIST (the paper's size by default; the weights do not change
the cost) to a temporary directory, starts `keras-capsules serve` on a free
loopback port, and drives it with closed-loop clients (each sends its next
request when the previous answer arrives), JSON bodies of real-looking uint8
images, for `--duration` seconds per scenario:

* `single`: 1 client, 1 image per request (latency without queueing);
* `single_concurrent`: `--clients` clients, 1 image per request;
* `batched`: 1 client, `--batch` images per request;
* `batched_concurrent`: `--clients` clients, `--batch` images per request;
* `mixed`: `--clients` clients, 1 image per request, of which a fraction
  `--bad-fraction` are bad (malformed JSON, wrong shapes, strings and booleans
  for pixels, NaN, a PNG bomb's header, unknown signatures, ...). Every good
  answer's class is checked against the model's (`wrong_answers`), every bad
  one must be a 400 (`bad_not_400`); rates and latencies are the good ones'.

Every answer of the other scenarios must be a 200; the counts of others are
reported. `--scenarios` picks some, e.g. the robustness figure of the serving
guide: `--model small --clients 16 --duration 60 --scenarios mixed --slowloris 200
--png-bombs 2`, where 200 connections trickle their headers a byte a second
and 2 clients post a PNG bomb in a loop beside the 16. Prints one JSON
object on stdout (requests/s, images/s, p50/p90/p99 latency in ms, per
scenario); progress goes to stderr.

    KERAS_BACKEND=tensorflow python benchmarks/serving.py
    KERAS_BACKEND=tensorflow python benchmarks/serving.py --model small --duration 3  # smoke
"""

import argparse
import http.client
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def post(port, path, body, answer=False):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        data = response.read()
        return (response.status, data) if answer else response.status
    finally:
        connection.close()


PNG_BOMB = 7
"""Index of the PNG bomb among `bad_requests`."""


def bad_requests(images):
    """Bodies the server must answer with a 400, one of each kind."""
    import base64

    png_bomb = (  # the header of a 16000x16000 16-bit RGBA PNG, and nothing else
        b"\x89PNG\r\n\x1a\n"
        + (13).to_bytes(4, "big")
        + b"IHDR"
        + (16000).to_bytes(4, "big") * 2
        + bytes([16, 6, 0, 0, 0])
        + bytes(4)
    )
    image = images[0].tolist()
    bodies = [
        b'{"instances": [[1, 2',
        b"[1, 2, 3]",
        b'{"instances": [[[NaN]]]}',
        {"instances": []},
        {"instances": np.zeros((1, 32, 32, 1)).tolist()},
        {"instances": [[["1"] * 28] * 28]},
        {"instances": [[[True] * 28] * 28]},
        {"instances": [{"b64": base64.b64encode(png_bomb).decode()}]},
        {"instances": [{"b64": "not base64!"}]},
        {"signature_name": "nope", "instances": [image]},
        {"signature_name": ["serving_default"], "instances": [image]},
    ]  # all small: a large body's cost is its parse, bounded by --max-request-bytes
    return [b if isinstance(b, bytes) else json.dumps(b).encode() for b in bodies]


def drive_mixed(
    port, name, good, expected, bad, clients, duration, bad_fraction, slowloris=0, bombers=0
):
    path = f"/v1/models/{name}:predict"
    latencies, statuses, wrong, bad_not_400 = [], [], [], []
    stop = time.perf_counter() + duration
    hostile, counts = hostile_load(port, path, bad[PNG_BOMB], slowloris, bombers, stop)

    def client(seed):
        rng = np.random.default_rng(seed)
        while time.perf_counter() < stop:
            if rng.uniform() < bad_fraction:
                status, _ = post(port, path, bad[rng.integers(len(bad))], answer=True)
                if status != 400:
                    bad_not_400.append(status)
                continue
            i = rng.integers(len(good))
            start = time.perf_counter()
            status, data = post(port, path, good[i], answer=True)
            latencies.append(time.perf_counter() - start)
            statuses.append(status)
            if status != 200 or json.loads(data)["predictions"][0]["classes"] != expected[i]:
                wrong.append(status)

    elapsed = run_clients(client, clients)
    for thread in hostile:
        thread.join(timeout=10)
    return {
        "clients": clients,
        "bad_fraction": bad_fraction,
        "slowloris_connections": slowloris,
        "png_bomb_clients": bombers,
        **(counts if slowloris or bombers else {}),
        "good_requests": len(latencies),
        "good_requests_per_s": round(len(latencies) / elapsed, 2),
        **percentiles(latencies),
        "wrong_answers": len(wrong),
        "bad_not_400": len(bad_not_400),
    }


def hostile_load(port, path, bomb, slowloris, bombers, stop):
    """Beside the clients until `stop`: a slowloris and PNG bombs; the threads and their counts.

    `slowloris` connections each send a request's headers one byte a second,
    reconnecting when the server closes them; `bombers` threads post the PNG
    bomb's body in a loop, each answer expected to be a 400.
    """
    import socket

    counts = {"slowloris_closed_by_server": 0, "bombs": 0, "bombs_not_400": 0}
    lock = threading.Lock()
    header = f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n".encode()

    def trickle():
        while time.perf_counter() < stop:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
                    for i in range(len(header)):
                        if time.perf_counter() >= stop:
                            return
                        connection.sendall(header[i : i + 1])
                        time.sleep(1.0)
            except OSError:  # closed by the server: slow clients lose their connection
                with lock:
                    counts["slowloris_closed_by_server"] += 1
                time.sleep(0.1)

    def bomber():
        while time.perf_counter() < stop:
            status = post(port, path, bomb)
            with lock:
                counts["bombs"] += 1
                counts["bombs_not_400"] += status != 400

    threads = [threading.Thread(target=trickle, daemon=True) for _ in range(slowloris)]
    threads += [threading.Thread(target=bomber, daemon=True) for _ in range(bombers)]
    for thread in threads:
        thread.start()
    return threads, counts


def drive(port, name, body, clients, duration):
    path = f"/v1/models/{name}:predict"
    latencies, statuses = [], []
    stop = time.perf_counter() + duration

    def client():
        while time.perf_counter() < stop:
            start = time.perf_counter()
            statuses.append(post(port, path, body))
            latencies.append(time.perf_counter() - start)

    elapsed = run_clients(lambda seed: client(), clients)
    return {
        "clients": clients,
        "requests": len(latencies),
        "requests_per_s": round(len(latencies) / elapsed, 2),
        **percentiles(latencies),
        "non_200": sum(s != 200 for s in statuses),
    }


def run_clients(client, clients):
    """Run `client(seed)` in `clients` threads at once; the seconds until all end."""
    threads = [threading.Thread(target=client, args=(seed,)) for seed in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return time.perf_counter() - began


def percentiles(latencies):
    p50, p90, p99 = np.percentile(np.array(latencies) * 1000, [50, 90, 99])
    return {
        "p50_ms": round(float(p50), 2),
        "p90_ms": round(float(p90), 2),
        "p99_ms": round(float(p99), 2),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("paper", "small"), default="paper")
    p.add_argument("--duration", type=float, default=20.0, help="seconds per scenario (20)")
    p.add_argument("--clients", type=int, default=8, help="concurrent clients (8)")
    p.add_argument("--batch", type=int, default=32, help="images per batched request (32)")
    p.add_argument("--bad-fraction", type=float, default=0.3, help="mixed: bad requests (0.3)")
    p.add_argument(
        "--scenarios", default="single,single_concurrent,batched,batched_concurrent,mixed"
    )
    p.add_argument(
        "--slowloris",
        type=int,
        default=0,
        help="mixed: connections trickling their headers a byte a second beside the clients (0)",
    )
    p.add_argument(
        "--png-bombs", type=int, default=0, help="mixed: clients posting a PNG bomb in a loop (0)"
    )
    args = p.parse_args(argv)

    # Importing keras_capsules (before TensorFlow runs) chooses the pooled CPU allocator for
    # this process, which exports the model, and the server, which inherits the variable.
    import keras

    import applications
    from keras_capsules.serving import export_saved_model

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from tests._local_http import free_port  # the checkout's test helpers
    from tests._local_http import wait_for_http

    keras.utils.set_random_seed(0)
    small = dict(conv_filters=32, primary_capsule_types=8) if args.model == "small" else {}
    model = applications.CapsNetMNIST(**small)
    workdir = tempfile.mkdtemp(prefix="serving-bench-")
    export_saved_model(model, os.path.join(workdir, "capsnet"), verbose=False)
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "keras_capsules.cli", "serve", os.path.join(workdir, "capsnet")]
        + ["--port", str(port), "--max-batch-size", str(max(256, args.batch))],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        try:
            wait_for_http(port, "/v1/models/capsnet", server, timeout=300)
        except RuntimeError as error:
            raise SystemExit(str(error)) from None
        images = np.random.default_rng(0).integers(0, 256, (args.batch, 28, 28, 1))
        one = json.dumps({"instances": images[:1].tolist()}).encode()
        many = json.dumps({"instances": images.tolist()}).encode()
        for _ in range(5):  # warm up: traces, thread pools, connections
            post(port, "/v1/models/capsnet:predict", one)
            post(port, "/v1/models/capsnet:predict", many)
        results = {}
        scenarios = {
            "single": (one, 1, 1),
            "single_concurrent": (one, args.clients, 1),
            "batched": (many, 1, args.batch),
            "batched_concurrent": (many, args.clients, args.batch),
        }
        chosen = args.scenarios.split(",")
        for name, (body, clients, per_request) in scenarios.items():
            if name not in chosen:
                continue
            log(f"{name}: {clients} client(s), {per_request} image(s) per request")
            result = drive(port, "capsnet", body, clients, args.duration)
            result["images_per_request"] = per_request
            result["images_per_s"] = round(result["requests_per_s"] * per_request, 1)
            results[name] = result
            log(json.dumps(result))
        if "mixed" in chosen:
            log(f"mixed: {args.clients} clients, {args.bad_fraction:.0%} bad requests")
            good = [
                json.dumps({"instances": images[i : i + 1].tolist()}).encode() for i in range(8)
            ]
            expected = model.predict(images[:8].astype("float32"), verbose=0)["probabilities"]
            expected = expected.argmax(-1).tolist()
            results["mixed"] = drive_mixed(
                port,
                "capsnet",
                good,
                expected,
                bad_requests(images),
                args.clients,
                args.duration,
                args.bad_fraction,
                args.slowloris,
                args.png_bombs,
            )
            log(json.dumps(results["mixed"]))
    finally:
        server.terminate()
        server.wait(timeout=60)
    print(
        json.dumps(
            {
                "benchmark": "serving",
                "model": args.model,
                "parameters": model.count_params(),
                "duration_s": args.duration,
                "request_body_bytes": {"single": len(one), "batched": len(many)},
                "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
