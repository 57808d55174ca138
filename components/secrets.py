"""A Kubernetes Secret's values, as every Secret of the program sends them."""

from __future__ import annotations

import base64

import pulumi


def secret_data(value: pulumi.Input[str]) -> pulumi.Output[str]:
    """A Secret's `data` value: `value` base64-encoded, and a Pulumi secret end to end.

    Not `stringData`: the API server folds stringData into data and never returns it, so under
    server-side apply (the cluster's provider sets enable_server_side_apply) the applier owns a
    field the object does not hold, and another manager applying the same key conflicts on
    `stringData.<key>` (Kubernetes docs, Secrets: "stringData ... does not work well with
    server-side apply", kubernetes/website PR #43668). pulumi-kubernetes rewrites stringData into
    data in Check only when no input is unknown (provider/pkg/provider/provider.go normalizeInputs
    :2983-2990, clients/unstructured.go normalizeSecretStringData :134-154, at @94977969d6), so
    which of the two its checked inputs hold depends on when Check ran (a preview of a new stack
    has an unknown namespace). With `data` the inputs, the applied object and every later read
    are one form (normalizeSecretData decodes and re-encodes, :157-188, which leaves standard
    base64 as it is), so a later `up` or refresh sees no change. pulumi-kubernetes marks a
    Secret's `data` secret in its state (annotateSecrets, provider.go :3470-3480).
    """
    return pulumi.Output.secret(value).apply(lambda v: base64.b64encode(v.encode()).decode())
