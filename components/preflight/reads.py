"""Data-source reads that preflight issues together, and waits for at once.

`later` is a pulumi_gcp data source as a coroutine: the same token, arguments, result type and
invoke options as the generated function (e.g. pulumi_gcp/container/get_engine_versions.py), but
not awaited yet. `together` runs several at once and blocks until all have answered.

Not the generated `*_output` forms: a failed one stays tracked as a failed Output, and the SDK
re-raises it when the program ends, even when the caller handled it (pulumi 3.272.0
pulumi/output.py `_track` :159-176, pulumi/runtime/stack.py `wait_for_rpcs` :193-212). A
coroutine of `pulumi.runtime.invoke_async` raises its failure to whoever awaits it, and nowhere
else: the SDK
returns a data source's error as data (pulumi/runtime/invoke.py `do_invoke`, :340-357, and the
comment at :409-413; pulumi #6504, "Make data sources catchable in Python"), and its RPC manager
records as unhandled only what the wrapped call itself raises (pulumi/runtime/rpc_manager.py
`rpc_wrapper`, :67-84).
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable

import pulumi
from pulumi.runtime.sync_await import _sync_await
from pulumi_gcp import _utilities


def later(token: str, result_type: type, **args: Any) -> Awaitable[Any]:
    """The data source `token` with `args` (camelCase, as the generated function sends them),
    answered as `result_type`; nothing is sent until it is awaited."""
    # The provider version the generated functions pin their invokes to.
    opts = _utilities.get_invoke_opts_defaults()
    return pulumi.runtime.invoke_async(token, args, opts=opts, typ=result_type)


def together(reads: dict[str, Awaitable[Any] | None]) -> dict[str, Any]:
    """The answer to every read (None stays None), all in flight before the first answers. A
    failed read is its exception, caught.

    The program must know the answers before it registers anything, so this blocks the way the
    SDK's own synchronous invokes do (pulumi/runtime/invoke.py `invoke` -> `_sync_await`).
    """
    pending = {key: read for key, read in reads.items() if read is not None}

    async def wait() -> list[Any]:
        return await asyncio.gather(*pending.values(), return_exceptions=True)

    answers = dict(zip(pending, _sync_await(wait())))
    return {key: answers.get(key) for key in reads}
