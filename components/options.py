"""Resource options every component gives its children."""

from __future__ import annotations

import pulumi


def child_options(
    parent: pulumi.ComponentResource, opts: pulumi.ResourceOptions | None, **extra
) -> pulumi.ResourceOptions:
    """Parented to the component, and waiting for whatever the component was told to wait for.

    A component's `depends_on` is not recorded on its children (pulumi/pulumi#8721): creation
    order happens to hold because a child waits for its parent's URN, but the engine's graph,
    which orders deletes and `--target` runs, would miss the edge. So it is passed down.
    `extra` adds options (and further `depends_on`) for one child.
    """
    inherited = pulumi.ResourceOptions(
        parent=parent, depends_on=list(opts.depends_on or []) if opts else None
    )
    return pulumi.ResourceOptions.merge(inherited, pulumi.ResourceOptions(**extra))


def fixed_name(
    opts: pulumi.ResourceOptions | None, name_field: str = "name", **extra
) -> pulumi.ResourceOptions:
    """Options for a Google Cloud resource whose `name` the program sets.

    One name is one object: replacing it must delete the old object before creating the new
    one, or the create fails with 409 Already exists; and a changed name must be a replacement,
    never an in-place update sent to an API that cannot rename. pulumi-terraform-bridge infers
    delete-first for an explicitly set auto-nameable `name` (nameRequiresDeleteBeforeReplace)
    and most providers mark `name` ForceNew, but neither holds everywhere:
    google_compute_resource_policy's `name` lost ForceNew in terraform-provider-google v5.38
    (commit acf4291ef4, "Make ResourcePolicy updatable"), so a rename would be a PATCH. Both are
    stated here instead of resting on those internals. Not for the bucket: deleting it first
    would delete the checkpoints (components/storage/gcs_fuse_storage.py never replaces it).
    `name_field` is the input that names the resource where it is not `name` (camelCase, as
    the engine's replaceOnChanges takes it: `repositoryId`).
    """
    stated = pulumi.ResourceOptions(delete_before_replace=True, replace_on_changes=[name_field])
    return pulumi.ResourceOptions.merge(
        pulumi.ResourceOptions.merge(opts, stated), pulumi.ResourceOptions(**extra)
    )
