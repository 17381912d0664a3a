"""`keras-capsules serve`: an exported model behind TF Serving's REST API (KServe).

    keras-capsules serve models/capsnet --port 8501

Serves the highest version under the folder `export` wrote
(`keras_capsules.serving.serve`).
"""

from keras_capsules.cli.argument_types import positive_int


def add_parser(commands, catalog):
    """Add the `serve` subcommand and its arguments to `commands` (argparse subparsers)."""
    serve = commands.add_parser(
        "serve", help="serve an exported model with TF Serving's REST API (KServe)"
    )
    serve.add_argument("model_dir", help="directory written by `export` (highest version served)")
    serve.add_argument("--port", type=int, default=8501)
    serve.add_argument(
        "--host", default="127.0.0.1", help="interface to bind (0.0.0.0 exposes the server)"
    )
    serve.add_argument("--model-name", default=None, help="name in the URLs (default: folder)")
    serve.add_argument("--max-batch-size", type=positive_int, default=256)
    serve.add_argument(
        "--max-request-bytes",
        type=positive_int,
        default=16 * 1024 * 1024,
        help="larger bodies get a 413",
    )
    serve.add_argument(
        "--request-timeout",
        type=float,
        default=10.0,
        help="seconds a request may take to arrive before its connection is closed (10)",
    )
    serve.add_argument(
        "--max-connections", type=positive_int, default=4096, help="beyond this, requests get a 503"
    )
    serve.add_argument(
        "--no-range-check",
        dest="check_range",
        action="store_false",
        help="answer pixels outside the model's input range instead of refusing them (400)",
    )
    return serve


def run(args):
    """Run `keras-capsules serve` with parsed arguments until interrupted; return the status."""
    from keras_capsules.serving import serve as run_server

    try:
        run_server(
            args.model_dir,
            port=args.port,
            host=args.host,
            model_name=args.model_name,
            max_batch_size=args.max_batch_size,
            max_request_bytes=args.max_request_bytes,
            request_timeout=args.request_timeout,
            max_connections=args.max_connections,
            check_range=args.check_range,
        )
    except (FileNotFoundError, ValueError, ImportError) as error:
        raise SystemExit(f"keras-capsules serve: {error}") from None
    return 0
