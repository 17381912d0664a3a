"""keras-tuner's distributed mode: the process's role, the chief's server, the workers' client.

The chief serves its oracle with keras-tuner's gRPC service (`_serve`); the
workers reach it through keras-tuner's `OracleClient`, made to reconnect
faster, to send a call again when the chief restarts, to beat while a trial
runs (`_Heartbeat`) and to wait when told IDLE (`_worker_client`). See
`keras_capsules.tuning.tuners` for what this gives a search.
"""

import os
import threading
import time


def role():
    """`"chief"`, `"worker"` or `None` (one process), from keras-tuner's environment variables."""
    if "KERASTUNER_ORACLE_IP" not in os.environ:
        return None
    if "chief" in os.environ.get("KERASTUNER_TUNER_ID", ""):
        return "chief"
    return "worker"


def _oracle_address():
    return f"{os.environ['KERASTUNER_ORACLE_IP']}:{os.environ['KERASTUNER_ORACLE_PORT']}"


def _serve(oracle, poll_seconds=0.5):
    """Serve `oracle` to the workers until the search is over (keras-tuner's gRPC service)."""
    from concurrent import futures

    import grpc

    from keras_capsules._compat import keras_tuner as keras_tuner_compat

    address = _oracle_address()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    servicer = keras_tuner_compat.oracle_servicer(oracle)
    keras_tuner_compat.service_grpc().add_OracleServicer_to_server(servicer, server)
    try:
        bound = server.add_insecure_port(address)
    except RuntimeError:
        bound = 0
    if not bound:
        raise RuntimeError(f"The chief oracle cannot listen on {address}: is the port in use?")
    server.start()
    print(f"Chief oracle serving on {address}", flush=True)
    try:
        while oracle.fatal_error is None:
            time.sleep(poll_seconds)
            oracle.reap()
            done = servicer.stop_triggered or oracle.finished()
            if done and not oracle.ongoing_trials and not oracle.tuner_ids:
                break
    finally:
        server.stop(grace=1).wait()
    if oracle.fatal_error is not None:
        raise RuntimeError(oracle.fatal_error)


class _RetryingStub:
    """A gRPC stub whose calls are sent again when the connection drops mid-call.

    Calls wait for the chief to be up (`wait_for_ready`), but one in flight
    when the chief dies fails as UNAVAILABLE; it is sent again once the chief
    is back. Each call is safe to repeat: a restarted chief gives a worker its
    running trial back (or a new one if it never saved the first), ignores a
    second end of a trial, and overwrites a metric reported twice.
    """

    def __init__(self, stub, patience):
        self._stub = stub
        self._patience = patience

    def __getattr__(self, name):
        import grpc

        method = getattr(self._stub, name)

        def call(request, **kwargs):
            deadline = time.time() + self._patience
            while True:
                try:
                    return method(request, **kwargs)
                except grpc.RpcError as error:
                    if error.code() != grpc.StatusCode.UNAVAILABLE or time.time() > deadline:
                        raise
                    time.sleep(0.5)

        return call


_CLIENT_CLASS = []


def _worker_client(local_oracle, idle_seconds):
    """keras-tuner's `OracleClient`, reconnecting faster, with heartbeats and a pause on IDLE."""
    if not _CLIENT_CLASS:
        import grpc

        from keras_capsules._compat import keras_tuner as keras_tuner_compat

        class WorkerClient(keras_tuner_compat.oracle_client_class()):
            def __init__(self, oracle, idle_seconds):
                super().__init__(oracle)
                options = [
                    ("grpc.initial_reconnect_backoff_ms", 500),
                    ("grpc.min_reconnect_backoff_ms", 500),
                    ("grpc.max_reconnect_backoff_ms", 2000),
                ]
                channel = grpc.insecure_channel(_oracle_address(), options=options)
                self.raw_stub = keras_tuner_compat.service_grpc().OracleStub(channel)
                patience = keras_tuner_compat.client_timeout()
                self.stub = _RetryingStub(self.raw_stub, patience=patience)
                self.idle_seconds = idle_seconds

            def create_trial(self, tuner_id):
                trial = super().create_trial(tuner_id)
                if trial.status == "IDLE":  # waiting for other trials: do not spin
                    time.sleep(self.idle_seconds)
                return trial

            def end_trial(self, trial):
                try:
                    super().end_trial(trial)
                except grpc.RpcError as error:  # the chief refused it: the search goes on
                    print(
                        f"Worker {self.tuner_id}: the chief did not take the end of trial "
                        f"{trial.trial_id} ({error.code().name}: {error.details()}).",
                        flush=True,
                    )

            def heartbeat(self, trial_id, timeout):
                self.raw_stub.GetTrial(
                    keras_tuner_compat.service_messages().GetTrialRequest(trial_id=trial_id),
                    wait_for_ready=True,
                    timeout=timeout,
                )

        _CLIENT_CLASS.append(WorkerClient)
    return _CLIENT_CLASS[0](local_oracle, idle_seconds)


class _Heartbeat:
    """A thread telling the chief every `interval` seconds that a trial is still running."""

    def __init__(self, client, trial_id, interval):
        self._stop = threading.Event()

        def beat():
            while not self._stop.wait(interval):
                try:
                    client.heartbeat(trial_id, timeout=max(1.0, interval))
                except Exception:  # the chief may be restarting: keep trying
                    pass

        self._thread = threading.Thread(target=beat, name=f"heartbeat-{trial_id}", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=5)
