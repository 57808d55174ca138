"""Two resources that create nothing in the cloud and exist for what the engine does with them.

- `BucketIdentity` records the bucket's name, location and project. A bucket cannot be renamed
  or moved: the Google provider would replace it (`name` and `location` are ForceNew in
  terraform-provider-google resource_storage_bucket.go), which either leaves the old bucket and
  its checkpoints behind (the default, `retainOnDelete`) or deletes them (`deleteBucketOnDestroy`).
  The engine hands `check` the inputs of the last deployment, so it refuses such a change at
  `pulumi preview` already, before the bucket is touched; the bucket depends on it.
- `DeletionProtection` depends on every other resource of the stack and carries Pulumi's
  `protect` while `verl-gke:deletionProtection` is true. `pulumi destroy` deletes dependents
  before what they depend on, and checks `protect` only when it reaches a resource
  (pulumi/pulumi pkg/resource/deploy/step.go, DeleteStep.Apply), then skips whatever an errored
  step depends on (deployment_executor.go). Deleted first, this resource makes the whole destroy
  fail with nothing touched: not the job, not the RayCluster, not the GPU pool.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi.dynamic as dynamic

from components import unknowns
from components.messages import quoted
from components.provider_home import check_home
from components.forms.pulumi_forms import Key


def deletion_protection_fix() -> str:
    """The commands that lift deletion protection, the key under the project's name."""
    return f"pulumi config set {Key('deletionProtection')} false && pulumi up && pulumi destroy"


# The guard's logical name. When it refuses a destroy, the engine prints only its URN, with its
# own advice: "use the command: pulumi state unprotect '<urn>'" (pulumi/pulumi
# pkg/resource/deploy/step.go, DeleteStep.Apply). That advice is wrong here: it lifts the guard
# while the cluster and its nodes still carry `protect`, so the destroy then deletes the job,
# the RayCluster and the node pools and stops at the cluster, half done. So the name, the one
# thing the message shows, says what to do instead.
GUARD_NAME = "to-destroy-set-deletionProtection-false-then-up"
# Its name until then: the alias keeps deployed stacks' guard (names are a contract).
FORMER_GUARD_NAME = "deletion-protection"


class _Record(dynamic.ResourceProvider):
    """Stores its inputs as its state; nothing outside the stack is read or written."""

    def create(self, props: dict[str, Any]) -> dynamic.CreateResult:
        return dynamic.CreateResult(props["record_id"], props)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.DiffResult:
        changed = [key for key in news if olds.get(key) != news.get(key)]
        return dynamic.DiffResult(changes=bool(changed), replaces=[])

    def update(self, _id: str, _olds: dict[str, Any], news: dict[str, Any]) -> dynamic.UpdateResult:
        return dynamic.UpdateResult(news)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None


class BucketIdentityProvider(_Record):
    IMMUTABLE = (("name", "verl-gke:bucketName"), ("location", "verl-gke:region"), ("project", "gcp:project"))

    def check(self, olds: dict[str, Any], news: dict[str, Any]) -> dynamic.CheckResult:
        return dynamic.CheckResult(news, [dynamic.CheckFailure(k, m) for k, m in moves(olds, news)])


def moves(olds: dict[str, Any], news: dict[str, Any]) -> list[tuple[str, str]]:
    """(input, message) for each identity field that differs from the deployed bucket's."""
    if not olds.get("name"):
        return []  # first deployment, or the stack was destroyed: nothing to move
    found = []
    for field, key in BucketIdentityProvider.IMMUTABLE:
        old, new = olds.get(field), news.get(field)
        if old == new or unknowns.is_unknown(new):  # a preview's unknown is not a move
            continue
        found.append((
            field,
            f"the bucket {quoted(olds['name'])} ({olds.get('location')}) holds this stack's "
            f"model, data and checkpoints, and {key} now asks for {field} {quoted(new)} instead "
            f"of {quoted(old)}: a bucket cannot be renamed or moved, and replacing it would "
            "leave the checkpoints behind (or delete them with deleteBucketOnDestroy). Set "
            f"{key} back to {quoted(old)}. To start over in a new bucket, `pulumi destroy` this "
            "stack first (the old bucket is kept), or drop the old one from this stack's state "
            "only (`pulumi state delete` the storage-bucket and bucket-identity resources; the "
            "bucket itself stays) and run `pulumi up` again",
        ))
    return found


class BucketIdentity(dynamic.Resource, module="verl-gke", name="BucketIdentity"):
    """The deployed bucket's identity; `check` refuses to change it (see the module doc).

    The program's first registration, so it first makes sure that the engine's provider
    process can import the dynamic providers at all (components/provider_home.py)."""

    def __init__(
        self, name: str, bucket: str, location: str, project: str,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        check_home()
        props = {"record_id": bucket, "name": bucket, "location": location, "project": project}
        super().__init__(BucketIdentityProvider(), name, props, opts)


class DeletionProtection(dynamic.Resource, module="verl-gke", name="DeletionProtection"):
    """Deleted first by `pulumi destroy`; protected while deletion protection is on. The
    stack's guard is named GUARD_NAME, and carries an alias from FORMER_GUARD_NAME."""

    def __init__(
        self, name: str, protected: bool, resources: list[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        props = {
            # The id deployed stacks have: a new one would only be a pointless update.
            "record_id": FORMER_GUARD_NAME,
            "protected": protected,
            # What the engine's "cannot be deleted because it is protected" means here.
            "to_destroy": deletion_protection_fix(),
        }
        mine = pulumi.ResourceOptions(
            protect=protected, depends_on=resources,
            aliases=[pulumi.Alias(name=FORMER_GUARD_NAME)] if name == GUARD_NAME else None,
        )
        super().__init__(_Record(), name, props, pulumi.ResourceOptions.merge(opts, mine))
