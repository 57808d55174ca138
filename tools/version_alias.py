"""Move a stack created before the minor-alias change off its stored exact GKE patch, once.

The cluster ignores changes to `minMasterVersion` (components/cluster/gke_cluster.py
ignored_inputs), and the engine copies an ignored input's stored value into the new inputs
(pulumi/pulumi pkg/resource/deploy/step_generator.go processIgnoreChanges). A stack whose first
`up` predates components/preflight/gke_version.py's alias stores a patch (`1.34.3-gke.1051000`)
and keeps sending it; a later replacement of the cluster would ask GKE for that patch as
`initialClusterVersion` (terraform-provider-google-beta @93c65b2d60
resource_container_cluster.go:3203) after GKE has retired it. This rewrites the stored value to
its minor (`1.34`) in a `pulumi stack export` document, for `pulumi stack import`
(docs/operations.md, "Stacks created before the minor alias").

The rewrite changes nothing in the cloud: min_master_version is Optional and never read back
(:1799-1801; Read sets master_version, :3752), the ignore keeps it out of the next diff, and
even without the ignore the provider upgrades only when the running version is lower than the
one asked for (:4918-4931, `cur.LessThan(des)`), which a minor alias never is
(hashicorp/go-version orders `1.34.6-gke.N` above `1.34`; REAL-PROVIDER-REVIEW-3 finding 3).
Secrets stay as the export wrote them (ciphertext).

    pulumi stack export --file state.json
    .venv/bin/python -m tools.version_alias state.json
    pulumi stack import --file state.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from components.preflight.gke_version import minor
from tools import cli

CLUSTER = "gcp:container/cluster:Cluster"
FIELD = "minMasterVersion"


def to_alias(export: dict[str, Any]) -> list[str]:
    """Rewrite, in place, every GKE cluster's stored exact `minMasterVersion` (its inputs and
    its provider state) to its minor; the URNs changed. An alias is left as it is."""
    try:
        resources = export["deployment"]["resources"] or []
    except (KeyError, TypeError):
        raise cli.UsageError(
            "the file is not a `pulumi stack export` document (no deployment.resources): "
            "export it with `pulumi stack export --file state.json`"
        ) from None
    changed = []
    for resource in resources:
        if resource.get("type") != CLUSTER:
            continue
        for part in ("inputs", "outputs"):
            values = resource.get(part) or {}
            stored = values.get(FIELD)
            if isinstance(stored, str) and "-gke." in stored:
                try:
                    values[FIELD] = minor(stored)
                except ValueError:
                    raise cli.UsageError(
                        f"{resource['urn']}: {part}.{FIELD} = {stored!r} is not a GKE version: "
                        "set it by hand to the minor the cluster runs (`1.34`), then import"
                    ) from None
                if resource["urn"] not in changed:
                    changed.append(resource["urn"])
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("state", type=Path, help="the file `pulumi stack export --file` wrote")
    args = parser.parse_args(argv)
    if not args.state.is_file():
        raise cli.UsageError(
            f"state = {str(args.state)!r}: no such file. Write it first with "
            f"`pulumi stack export --file {args.state}`"
        )
    try:
        export = json.loads(args.state.read_text())
    except json.JSONDecodeError as error:
        raise cli.UsageError(
            f"state = {str(args.state)!r} is not JSON ({error}): write it with "
            "`pulumi stack export --file state.json`"
        ) from None
    changed = to_alias(export)
    if not changed:
        print(f"{args.state}: no cluster stores an exact patch; nothing to do")
        return 0
    args.state.write_text(json.dumps(export, indent=4) + "\n")
    for urn in changed:
        print(f"{urn}: {FIELD} is now the minor alias")
    print(f"now run: pulumi stack import --file {args.state}")
    return 0


if __name__ == "__main__":
    sys.exit(cli.run(main))
