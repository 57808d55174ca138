"""Ray's log files to Cloud Logging: a sidecar that prints them, one tagged line at a time.

Ray writes its logs to files under /tmp/ray/session_latest/logs, not to the container's stdout,
so GKE's workload logging (which collects stdout and stderr) never sees them. The job's own
output (verl's `step:N - key:value - ...` lines, and every actor's stdout that Ray echoes into
the driver, `log_to_driver`) lands in `job-driver-<submission id>.log`; Ray's job supervisor
records the entrypoint's exit code in `jobs/supervisor-<submission id>.log`
(ray/dashboard/modules/job/job_supervisor.py, "Job {id} entrypoint command exited with code N").

The sidecar follows those files and prints each line prefixed with `[<file stem>] `, so every
line reaches Cloud Logging as the `textPayload` of a `k8s_container` entry of container
`ray-log-shipper` (GKE: non-JSON stdout lines become textPayload), and the prefix names the file
and thus the run (`[job-driver-<submission id>] ...`). The log-based metrics
(components/observability/training_log.py) read exactly that shape, on every target: the GKE
Ray add-on's own log collection (A4, A3 Ultra) documents no line format to build extractors on.

On A4X, which runs without the add-on, the sidecar also ships Ray's system logs (raylet, GCS,
dashboard) from the head and every worker, so that Ray's logs reach Cloud Logging there too.

It is a native sidecar (an init container with `restartPolicy: Always`, Kubernetes >= 1.29; the
clusters run 1.34): it starts before Ray, stops after it, and leaves the pod's `containers` list
to Ray (KubeRay treats the first container as the Ray container). It uses the Ray image, which
the node has already pulled, so it adds no image to pin or pull. What it does not do: parse,
sample or drop lines; ship worker processes' own files (their output reaches the driver log).
"""

from __future__ import annotations

from typing import Any

CONTAINER = "ray-log-shipper"
LOGS_DIR = "/tmp/ray/session_latest/logs"

# The job's files, relative to the logs dir: what the training metrics and alerts read.
JOB_LOG_PATTERNS = ("job-driver-*.log", "jobs/supervisor-*.log")
# Ray's own processes on every node, for A4X parity with the add-on's log collection.
SYSTEM_LOG_PATTERNS = (
    "raylet.out", "raylet.err", "gcs_server.out", "gcs_server.err",
    "dashboard.log", "dashboard_agent.log", "monitor.log",
)

# POSIX sh, GNU tail, stdbuf and GNU sed (all in the Ubuntu-based verl images, and here for the tests).
# - A file seen in the first scan after the sidecar (re)starts is followed from its end: an
#   earlier run of the sidecar in this pod already shipped it (the emptyDir outlives a container
#   restart), and shipping it again would count failures and NaN rewards twice. The sidecar
#   starts before Ray, so in a new pod the first scan finds nothing.
# - Files that appear later are shipped from their first line.
# - `tail -F` follows a name, so a rotated file (Ray rotates at 512 MB) is picked up again.
# - GNU tail keeps a file's existing lines in its stdio buffer when writing to a pipe until the
#   file changes again (seen with coreutils here): `stdbuf -oL` makes it write line by line,
#   so a finished job's last lines are not held back. `sed -u` reads and writes unbuffered
#   (mawk, Ubuntu's awk, reads a pipe in blocks and would hold lines back the same way).
# - Tags are file stems: submission ids and Ray's file names hold no `|`, `&` or `\`.
SCRIPT = r"""
set -u
logs="${RAY_LOGS_DIR:-/tmp/ray/session_latest/logs}"
trap 'trap - TERM INT; kill 0 2>/dev/null; exit 0' TERM INT
seen=" "
first=1
while :; do
  for pattern in $SHIP_PATTERNS; do
    for file in "$logs"/$pattern; do
      [ -f "$file" ] || continue
      case "$seen" in *" $file "*) continue ;; esac
      seen="$seen$file "
      start=+1
      [ "$first" = 1 ] && start=0
      tag=$(basename "$file" .log)
      stdbuf -oL tail -n "$start" -F "$file" 2>/dev/null | sed -u "s|^|[$tag] |" &
    done
  done
  first=0
  sleep "${SHIP_SCAN_SECONDS:-5}"
done
"""

# Room for a tail and a sed per followed file (a handful on the head, a few more on A4X).
RESOURCES = {"cpu": "100m", "memory": "256Mi"}


def shipper_container(
    image: str, logs_volume: str, mount_path: str, patterns: tuple[str, ...]
) -> dict[str, Any]:
    """The sidecar, as an entry of the pod's `initContainers`.

    logs_volume / mount_path: the volume Ray writes /tmp/ray into and where the Ray container
    mounts it (the head mounts it at /tmp/ray, the workers at /tmp).
    """
    if mount_path not in ("/tmp/ray", "/tmp"):
        # Both put LOGS_DIR at the same path inside the sidecar as inside the Ray container.
        raise ValueError(f"mount_path {mount_path!r}: mount the volume at /tmp/ray or /tmp")
    return {
        "name": CONTAINER,
        "image": image,
        # Native sidecar: kept running for the pod's life, started before the Ray container.
        "restartPolicy": "Always",
        "command": ["/bin/sh", "-c", SCRIPT],
        "env": [
            {"name": "SHIP_PATTERNS", "value": " ".join(patterns)},
            {"name": "RAY_LOGS_DIR", "value": LOGS_DIR},
        ],
        "resources": {"requests": dict(RESOURCES), "limits": dict(RESOURCES)},
        "volumeMounts": [{"name": logs_volume, "mountPath": mount_path, "readOnly": True}],
    }

