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
