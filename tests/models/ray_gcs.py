"""The GCS's node and actor tables as Ray 2.49.0's State API lists them (tests/models/ray_jobs.py
owns the Jobs API; the head's generation owns these tables: a head restart without GCS fault
tolerance starts them empty).

Cited from ray-2.49.0 (components/facts/pins.py RAY_VERSION; installed as `ray/...`):
- GET /api/v0/nodes and /api/v0/actors (dashboard/modules/state/state_head.py:96-120) answer
  {"result": true, "msg": "", "data": {"result": {"total", "num_after_truncation",
  "num_filtered", "result": [rows]}}} (dashboard/state_api_utils.py:36-48, do_reply). `limit`
  defaults to 100 (util/state/common.py:48 DEFAULT_LIMIT); one above 10,000
  (RAY_MAX_LIMIT_FROM_API_SERVER, :53-55) raises ValueError outside the handler's try, so the
  head answers 500 (state_api_utils.py:64-74). `detail=true` adds the detail columns
  (common.py:367-379 filter_fields), e.g. a node's start_time_ms and end_time_ms (:580-589).
- Node rows (NodeState, common.py:555-589; state_aggregator.py:191-214): node_id, node_ip,
  is_head_node, state ALIVE|DEAD, state_message (None while alive; a dead node's reason,
  dashboard/utils.py:736-763, e.g. "Unexpected termination: health check failed due to missing
  too many heartbeats", as a local Ray 2.47 reported it for a SIGKILLed worker node, which
  tests/test_preemption_ray.py holds at the pin), node_name,
  resources_total, labels, start_time_ms, end_time_ms (0 while alive; for a node lost
  unexpectedly "could be delayed up to 30 seconds", :584-586), sorted by node_id (:213). A
  dead node stays listed; a node that joins again (KubeRay's replacement pod) is a new node id.
- Actor rows (ActorState, common.py:461-523; state_aggregator.py:80-124): actor_id, class_name,
  state, job_id, name, node_id, pid, ray_namespace, sorted by actor_id (:119). A dead actor
  stays listed with its node_id (seen on that local Ray: the lost node's actors DEAD, death
  cause OWNER_DIED, since their driver exited first). `filter_keys=job_id` is applied by the
  GCS (util/state/state_manager.py:195-227), `name` and the others by do_filter
  (state_api_utils.py:200-251); both are an equality.
- Job ids: each driver that connects gets the GCS's next job id, hex of a 4-byte little-endian
  counter: the dashboard's own is 01000000, so the first submission's driver is 02000000 (as
  seen on that local Ray); JobDetails carries it as `job_id` once the driver runs
  (dashboard/modules/job/utils.py:229-262, job_head.py:603-616). The jobs' supervisor actors
  belong to the dashboard's job, in namespace SUPERVISOR_ACTOR_RAY_NAMESPACE.
"""

from __future__ import annotations

import json
from typing import Any

DEFAULT_LIMIT, MAX_LIMIT = 100, 10_000
DASHBOARD_JOB = 1
LOST_MESSAGE = "Unexpected termination: health check failed due to missing too many heartbeats"
NODE_DETAIL = ("start_time_ms", "end_time_ms")
GPUS = 8  # one worker of 8 GPUs (world.check_result_line's inventory)


def job_hex(number: int) -> str:
    return number.to_bytes(4, "little").hex()


class Gcs:
    """The node and actor tables of one head's GCS."""

    def __init__(self, generation: int) -> None:
        self.generation = generation
        self.nodes: dict[str, dict[str, Any]] = {}
        self.actors: list[dict[str, Any]] = []
        self.jobs = DASHBOARD_JOB  # the last job id given
        self.workers = 0

    def node(self, node_id: str, ip: str, head: bool, now_ms: int) -> str:
        self.nodes[node_id] = {
            "node_id": node_id, "node_ip": ip, "is_head_node": head, "state": "ALIVE",
            "state_message": None, "node_name": ip,
            "resources_total": {"CPU": 0.0} if head else {"CPU": 200.0, "GPU": float(GPUS)},
            "labels": {}, "start_time_ms": now_ms, "end_time_ms": 0}
        return node_id

    def new_worker(self, now_ms: int) -> str:
        """A worker pod's raylet joins: a node id of its own (a replacement is a new node)."""
        self.workers += 1
        return self.node(f"{self.generation:02x}{self.workers:04x}".ljust(56, "b"),
                         f"10.0.0.{2 + self.workers}", False, now_ms)

    def dead(self, node_id: str, now_ms: int) -> None:
        node = self.nodes.get(node_id)
        if node is not None and node["state"] == "ALIVE":
            node.update(state="DEAD", end_time_ms=now_ms, state_message=LOST_MESSAGE)

    def next_job(self) -> str:
        self.jobs += 1
        return job_hex(self.jobs)

    def actor(self, class_name: str, name: str, job_id: str, node_id: str,
              namespace: str) -> dict[str, Any]:
        row = {"actor_id": f"{len(self.actors) + 1:08x}{job_id}".ljust(32, "f"),
               "class_name": class_name, "state": "ALIVE", "job_id": job_id, "name": name,
               "node_id": node_id, "pid": 1000 + len(self.actors), "ray_namespace": namespace}
        self.actors.append(row)
        return row

    def job_died(self, job_id: str) -> None:
        """A driver exited: its actors die with their owner (OWNER_DIED), rows kept."""
        for row in self.actors:
            if row["job_id"] == job_id:
                row["state"] = "DEAD"


def listing(rows: list[dict[str, Any]], query: dict[str, list[str]], key: str,
            detail_columns: tuple[str, ...] = ()) -> tuple[int, str]:
    """One State API list reply: equality filters, detail columns, sorted, `limit` rows."""
    limit = int((query.get("limit") or [DEFAULT_LIMIT])[0])
    if limit > MAX_LIMIT:
        return 500, (f"ValueError: Given limit {limit} exceeds the supported limit "
                     f"{MAX_LIMIT}. Use a lower limit.")
    detail = (query.get("detail") or ["false"])[0].lower() in ("true", "1")
    filters = list(zip(query.get("filter_keys", []), query.get("filter_predicates", []),
                       query.get("filter_values", [])))
    found = [dict(row) for row in rows if all(
        (str(row.get(k)) == v) == (p == "=") for k, p, v in filters)]
    if not detail:
        found = [{k: v for k, v in row.items() if k not in detail_columns} for row in found]
    found.sort(key=lambda row: row[key])
    shown = found[:limit]
    return 200, json.dumps({"result": True, "msg": "", "data": {"result": {
        "total": len(rows), "num_after_truncation": len(rows), "num_filtered": len(found),
        "result": shown}}})
