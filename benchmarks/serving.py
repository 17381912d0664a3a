"""Benchmark `keras-capsules serve`: requests/s and latency percentiles over HTTP.

Exports CapsNetMNIST (the paper's size by default; the weights do not change
the cost) to a temporary directory, starts `keras-capsules serve` on a free
loopback port, and drives it with closed-loop clients (each sends its next
request when the previous answer arrives), JSON bodies of real-looking uint8
images, for `--duration` seconds per scenario:

* `single`: 1 client, 1 image per request (latency without queueing);
* `single_concurrent`: `--clients` clients, 1 image per request;
* `batched`: 1 client, `--batch` images per request;
* `batched_concurrent`: `--clients` clients, `--batch` images per request.

Every answer must be a 200; the counts of others are reported. Prints one JSON
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


def post(port, path, body):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        connection.request("POST", path, body=body, headers={"Content-Type": "application/json"})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def drive(port, name, body, clients, duration):
    path = f"/v1/models/{name}:predict"
    latencies, statuses = [], []
    stop = time.perf_counter() + duration

    def client():
        while time.perf_counter() < stop:
            start = time.perf_counter()
            statuses.append(post(port, path, body))
            latencies.append(time.perf_counter() - start)

    threads = [threading.Thread(target=client) for _ in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - began
    p50, p90, p99 = np.percentile(np.array(latencies) * 1000, [50, 90, 99])
    return {
        "clients": clients,
        "requests": len(latencies),
        "requests_per_s": round(len(latencies) / elapsed, 2),
        "p50_ms": round(float(p50), 2),
        "p90_ms": round(float(p90), 2),
        "p99_ms": round(float(p99), 2),
        "non_200": sum(s != 200 for s in statuses),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("paper", "small"), default="paper")
    p.add_argument("--duration", type=float, default=20.0, help="seconds per scenario (20)")
    p.add_argument("--clients", type=int, default=8, help="concurrent clients (8)")
    p.add_argument("--batch", type=int, default=32, help="images per batched request (32)")
    args = p.parse_args(argv)

    import keras

    import applications
    from keras_capsules._local_http import free_port
    from keras_capsules._local_http import wait_for_http
    from keras_capsules.serving import export_saved_model

    keras.utils.set_random_seed(0)
    small = dict(conv_filters=32, primary_capsules=8) if args.model == "small" else {}
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
        for name, (body, clients, per_request) in scenarios.items():
            log(f"{name}: {clients} client(s), {per_request} image(s) per request")
            result = drive(port, "capsnet", body, clients, args.duration)
            result["images_per_request"] = per_request
            result["images_per_s"] = round(result["requests_per_s"] * per_request, 1)
            results[name] = result
            log(json.dumps(result))
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
