"""Shared helpers: run `pstrain local` clusters whose workers are Python
processes, and read what the test workers recorded."""

import json
import os
import re
import subprocess
import threading
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("PSTRAIN_BIN", os.path.join(REPO, "build", "bin"))
PYTHON = "/usr/bin/python3"
WORKERS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers")


def worker_command(script, *args):
    return " ".join([PYTHON, os.path.join(WORKERS, script), *args])


class Cluster:
    """A `pstrain local` run, its output collected as it comes."""

    def __init__(self, flags, timeout=240):
        self.lines = []
        self._cond = threading.Condition()
        self.proc = subprocess.Popen(
            [os.path.join(BIN, "pstrain"), "local", "--progress=plain", *flags,
             f"--timeout_s={timeout}"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            stdin=subprocess.DEVNULL)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.timeout = timeout

    def _read(self):
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_for_line(self, pattern, timeout=120):
        """The first output line matching `pattern` (a regex), waiting for it."""
        regex = re.compile(pattern)
        deadline = time.time() + timeout
        with self._cond:
            seen = 0
            while True:
                for line in self.lines[seen:]:
                    if regex.search(line):
                        return line
                seen = len(self.lines)
                left = deadline - time.time()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"no line matching {pattern!r}:\n" + self.output())
                self._cond.wait(min(left, 1.0))

    def pid_of(self, task):
        """The pid of the last start of `task` ("ps:0", "worker:1")."""
        pids = [int(m.group(1)) for m in
                (re.search(rf"started {re.escape(task)} \(pid (\d+)\)", l) for l in self.lines) if m]
        assert pids, f"{task} was never started:\n" + self.output()
        return pids[-1]

    def wait(self):
        """The exit code (the run's own --timeout_s bounds it)."""
        try:
            code = self.proc.wait(timeout=self.timeout + 60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=10)
        return code

    def output(self):
        with self._cond:
            return "\n".join(self.lines)

    def close(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def cluster():
    """Starts clusters with cluster(flags); every one is torn down after."""
    started = []

    def start(flags, timeout=240):
        c = Cluster(flags, timeout)
        started.append(c)
        return c

    yield start
    for c in started:
        c.close()


def read_records(directory, worker):
    path = os.path.join(directory, f"worker-{worker}.jsonl")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def wait_for_record(directory, worker, predicate, cluster, timeout=120):
    """The first record of `worker` for which predicate holds, waiting for
    the worker to write it."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for r in read_records(directory, worker):
            if predicate(r):
                return r
        if cluster.proc.poll() is not None:
            break
        time.sleep(0.1)  # the worker writes a file; nothing to wait on but its growth
    raise AssertionError(f"worker {worker} never recorded the awaited event:\n" + cluster.output())
