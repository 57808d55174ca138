"""tools/local_ray.py's worker nodes: what add_node does when `ray start` gives up on its raylet.

`ray start` waits 30 s for its raylet to register with the GCS and then exits (ray-2.49.0
_private/node.py, `raylet_start_wait_time_s = 30`, not configurable). On two loaded cores that
happened to tests/test_preemption_ray.py's node w1 in a CI-like run at ffd4d2e (8 errors). These
tests stand in for `ray start` and the State API; the real nodes start in test_preemption_ray."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import local_ray


class _Exited:
    """A `ray start` process that has ended with `code`."""

    def __init__(self, pid: int, code: int) -> None:
        self.pid, self.returncode = pid, code

    def poll(self) -> int:
        return self.returncode


class _Running(_Exited):
    def poll(self) -> None:
        return None


@pytest.fixture
def head(tmp_path: Path, monkeypatch):
    """A head whose node starts are scripted: each start writes the next log text and returns
    its process; the State API lists the node ALIVE once a running start exists."""
    head = local_ray.LocalRay(dashboard_url="http://127.0.0.1:1", dashboard_port=1,
                              gcs_address="127.0.0.1:2", metrics_port=3, temp_dir=tmp_path, pid=0)
    started, ended, alive = [], [], []

    def start(head_, name, ip, num_cpus, num_gpus):
        log, process = script.pop(0)
        (tmp_path / f"node-{name}.log").write_text(log)
        started.append(ip)
        if isinstance(process, _Running):
            alive.append({"node_name": name, "state": "ALIVE", "node_id": "n" * 56})
        return process

    script: list = []
    monkeypatch.setattr(local_ray, "_start_node", start)
    monkeypatch.setattr(local_ray, "_end_node", lambda head_, pid: ended.append(pid))
    monkeypatch.setattr(local_ray, "state_rows", lambda head_, path: list(alive))
    monkeypatch.setattr(local_ray, "_record_node_ip", lambda head_: None)
    return head, script, started, ended


def test_a_node_whose_raylet_registered_too_late_is_started_again(head):
    """The start that timed out is ended (its raylet may still come up) and the node started
    again at the same address; add_node returns the node that came up."""
    head, script, started, ended = head
    timed_out = f"...\nException: {local_ray.STARTUP_TIMED_OUT}. This could happen because"
    script += [(timed_out, _Exited(11, 1)), ("", _Running(12, 0))]
    node = local_ray.add_node(head, "w1", num_gpus=3, timeout_s=30)
    assert (node.name, node.pid) == ("w1", 12)
    assert ended == [11] and len(set(started)) == 1 and len(started) == 2


def test_any_other_exit_of_ray_start_is_the_nodes_failure(head):
    """An exit for another reason is not retried: the error carries `ray start`'s output."""
    head, script, started, ended = head
    script += [("ValueError: bad --num-gpus", _Exited(21, 1))]
    with pytest.raises(RuntimeError, match="ray start exited with 1:\nValueError: bad --num-gpus"):
        local_ray.add_node(head, "w1", timeout_s=30)
    assert len(started) == 1 and ended == [21]


def test_a_node_never_alive_is_ended_and_reported(head, monkeypatch):
    """A start that neither exits nor shows up ALIVE within the time is ended, and the caller
    gets a TimeoutError naming the node (not a retry, not a silent return)."""
    head, script, started, ended = head
    script += [("", _Running(31, 0))]
    monkeypatch.setattr(local_ray, "state_rows", lambda head_, path: [])  # never listed
    with pytest.raises(TimeoutError, match="node w1 not ALIVE after 1s"):
        local_ray.add_node(head, "w1", timeout_s=1)
    assert ended == [31] and len(started) == 1
