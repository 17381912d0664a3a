"""keras-tuner oracles with worker leases, an event log and a chief that can restart.

`_LeaseOracleMixin` adds to keras-tuner's three oracles what
`keras_capsules.tuning.tuners` describes: a trial whose worker stopped
reporting is ended (`reap`), what happens to the trials is appended to
`trial_log.jsonl`, the state is saved atomically and a restarted chief keeps
the trials its workers are still running.
"""

import json
import os
import time
from datetime import datetime

import keras_tuner as kt

from keras_capsules._compat import keras_tuner as keras_tuner_compat
from keras_capsules.tuning._service import role


def _save_json(path, state):
    """Write `state` as JSON to `path` atomically: a process killed meanwhile tears no file."""
    text = json.dumps(state)
    if "://" in str(path):  # a remote file system: keras-tuner's own writer
        return keras_tuner_compat.save_json(path, state)
    partial = f"{path}.{os.getpid()}.partial"
    with open(partial, "w") as f:
        f.write(text)
    os.replace(partial, path)
    return text


_synchronized = keras_tuner_compat.synchronized


class _LeaseOracleMixin:
    """Oracle additions: worker leases, an event log, ongoing trials kept by a restarted chief."""

    def __init__(self, *args, lease_seconds=120.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.lease_seconds = float(lease_seconds)
        self._last_seen = {}
        self._restored = {}
        self._saved_retry_queue = []
        self.fatal_error = None

    def _event(self, event, **fields):
        if keras_tuner_compat.project_dir(self) is None:
            return
        record = {"time": round(time.time(), 3), "event": event, **fields}
        with open(os.path.join(keras_tuner_compat.project_dir(self), "trial_log.jsonl"), "a") as f:
            f.write(json.dumps(record) + "\n")

    def _events(self):
        path = os.path.join(keras_tuner_compat.project_dir(self), "trial_log.jsonl")
        if not os.path.exists(path):
            return []
        records = []
        with open(path) as f:
            for line in f:
                try:
                    records.append(json.loads(line))
                except ValueError:  # a line torn by a kill
                    pass
        return records

    def _unknown(self, trial_id):
        """The answer about a trial this oracle does not know: a stopped trial without results."""
        return kt.engine.trial.Trial(self.get_space(), trial_id=trial_id, status="STOPPED")

    def _owner(self, trial_id):
        for tuner_id, trial in self.ongoing_trials.items():
            if trial.trial_id == trial_id:
                return tuner_id
        return None

    def _touch(self, trial_id):
        owner = self._owner(trial_id)
        if owner is not None:
            self._last_seen[owner] = time.time()
        return owner

    def _may_run_again(self):
        """Whether a running trial could be lost and run again: a worker is still needed."""
        return any(
            keras_tuner_compat.run_times(self)[trial.trial_id] < self.max_retries_per_trial
            for trial in self.ongoing_trials.values()
        )

    @_synchronized
    def create_trial(self, tuner_id):
        self._last_seen[tuner_id] = time.time()
        resumed = tuner_id in self.ongoing_trials
        trial = super().create_trial(tuner_id)
        if trial.status == "RUNNING":
            self.save()  # again: keras-tuner saves before its display records the trial
            self._event(
                "start",
                trial_id=trial.trial_id,
                tuner_id=tuner_id,
                run=keras_tuner_compat.run_times(self)[trial.trial_id] + 1,
                resumed=resumed,
            )
        elif trial.status == "STOPPED" and self._may_run_again():
            # No new trial, but a running one may be lost: the worker waits for it.
            self.tuner_ids.add(tuner_id)
            trial.status = "IDLE"
        return trial

    @_synchronized
    def get_trial(self, trial_id):
        self._touch(trial_id)  # workers call this as their heartbeat
        if trial_id not in self.trials:
            return self._unknown(trial_id)
        return super().get_trial(trial_id)

    @_synchronized
    def update_trial(self, trial_id, metrics, step=0):
        if self._touch(trial_id) is None:  # a late report for a trial given up: ignored
            return self.trials.get(trial_id) or self._unknown(trial_id)
        return super().update_trial(trial_id, metrics, step=step)

    @_synchronized
    def end_trial(self, trial):
        owner = self._touch(trial.trial_id)
        if owner is None:
            ended = self.trials.get(trial.trial_id)
            if ended is not None and ended.status == trial.status:
                if (
                    trial.trial_id in self.end_order
                    or trial.trial_id in keras_tuner_compat.retry_queue(self)
                ):
                    return  # the same end sent again: its answer was cut off by a restart
            print(
                f"Ignoring the late result of trial {trial.trial_id}: it was given up "
                "(its worker stopped reporting) or has ended already.",
                flush=True,
            )
            self._event("ignored", trial_id=trial.trial_id, status=trial.status)
            return
        self._end(trial, owner)

    def _end(self, trial, owner):
        # keras-tuner's display fails on a trial it did not see start (a restarted
        # chief's display misses the trials started just before the state was saved).
        display, now = keras_tuner_compat.display(self), datetime.now()
        display.search_start = display.search_start or now
        display.trial_start.setdefault(trial.trial_id, now)
        display.trial_number.setdefault(trial.trial_id, len(self.trials))
        try:
            super().end_trial(trial)
        except RuntimeError as error:  # too many consecutive failed trials
            self.fatal_error = str(error)
            raise
        finally:
            self._event_end(self.trials[trial.trial_id], owner)
        self.save()  # again: keras-tuner saves before the trial stops counting as running

    def _event_end(self, trial, owner, **fields):
        score = None if trial.score is None else float(trial.score)
        self._event(
            "end",
            trial_id=trial.trial_id,
            tuner_id=owner,
            status=trial.status,
            score=score,
            **fields,
        )

    @_synchronized
    def reap(self):
        """End the trials of workers silent for more than `lease_seconds`.

        Returns:
            The ids of the trials ended. Each is run again by the next free
            worker while `max_retries_per_trial` allows, else marked failed.
        """
        now = time.time()
        lost = []
        for tuner_id, trial in list(self.ongoing_trials.items()):
            silent = now - self._last_seen.setdefault(tuner_id, now)
            if silent <= self.lease_seconds:
                continue
            message = (
                f"Worker {tuner_id!r} stopped reporting {silent:.0f} s ago (lease "
                f"{self.lease_seconds:g} s) while running trial {trial.trial_id}."
            )
            print(message, flush=True)
            self._event("lost", trial_id=trial.trial_id, tuner_id=tuner_id)
            trial.status = "INVALID"
            trial.message = message
            self.tuner_ids.discard(tuner_id)
            try:
                self._end(trial, tuner_id)
            except RuntimeError:
                pass  # recorded in fatal_error; the chief stops
            lost.append(trial.trial_id)
        for tuner_id in list(self.tuner_ids):
            idle = now - self._last_seen.setdefault(tuner_id, now)
            if tuner_id not in self.ongoing_trials and idle > self.lease_seconds:
                self.tuner_ids.discard(tuner_id)
        return lost

    def save(self):
        _save_json(keras_tuner_compat.oracle_file(self), self.get_state())

    def _save_trial(self, trial):
        path = os.path.join(keras_tuner_compat.trial_dir(self, trial.trial_id), "trial.json")
        _save_json(path, trial.get_state())

    @_synchronized
    def finished(self):
        """Whether all `max_trials` trials have ended (none running or waiting for a retry)."""
        return bool(
            self.max_trials
            and len(self.trials) >= self.max_trials
            and not self.ongoing_trials
            and not keras_tuner_compat.retry_queue(self)
        )

    def set_state(self, state):
        super().set_state(state)
        self._saved_retry_queue = list(state["retry_queue"])
        # keras-tuner saves the state of an ended trial (in `end_order`, or queued
        # for a retry) while still counting it as running: it is not running.
        ended = set(self.end_order) | set(self._saved_retry_queue)
        self._restored = {
            tuner_id: trial
            for tuner_id, trial in self.ongoing_trials.items()
            if trial.trial_id not in ended
        }

    def reload(self):
        super().reload()  # queues the trials that were running (and ended ones) for a retry
        keras_tuner_compat.set_retry_queue(self, self._saved_retry_queue)
        # A trial file written without the state: the chief stopped while creating
        # the trial, before any worker was told about it; the worker asks again.
        for trial_id in [t for t in self.trials if t not in self.start_order]:
            del self.trials[trial_id]
        now = time.time()
        for tuner_id, trial in self._restored.items():
            trial.status = "RUNNING"  # its file may have been saved ended, before the state
            if role() == "chief":
                # Its worker may still be running it: keep it assigned; the lease
                # gives it up if the worker does not report.
                self.ongoing_trials[tuner_id] = trial
                self.tuner_ids.add(tuner_id)
                self._last_seen[tuner_id] = now
            else:
                keras_tuner_compat.retry_queue(self).append(trial.trial_id)
        self._recover_events()
        self._restored = {}

    def _recover_events(self):
        """Log the starts and ends of the state that a killed process did not log."""
        if keras_tuner_compat.project_dir(self) is None:
            return
        last = {}  # trial id: its last start or end event
        for record in self._events():
            if record.get("event") in ("start", "end"):
                last[record["trial_id"]] = record
        running = {trial.trial_id for trial in self._restored.values()}
        for trial_id, record in last.items():
            trial = self.trials.get(trial_id)
            if record["event"] == "start" and trial is not None and trial_id not in running:
                self._event_end(trial, record["tuner_id"], recovered=True)
        for tuner_id, trial in self.ongoing_trials.items():
            if last.get(trial.trial_id, {}).get("event") != "start":
                run = keras_tuner_compat.run_times(self)[trial.trial_id] + 1
                self._event(
                    "start", trial_id=trial.trial_id, tuner_id=tuner_id, run=run, recovered=True
                )


class _HyperbandOracle(_LeaseOracleMixin, kt.oracles.HyperbandOracle):
    pass


class _RandomSearchOracle(_LeaseOracleMixin, kt.oracles.RandomSearchOracle):
    pass


class _BayesianOptimizationOracle(_LeaseOracleMixin, kt.oracles.BayesianOptimizationOracle):
    pass
