"""Entry point the Pulumi CLI runs for `pulumi preview --policy-pack policy`.

The CLI starts `python __main__.py` inside policy/ (with the virtualenv PulumiPolicy.yaml names);
PolicyPack then serves the analyzer protocol until the CLI is done. rules.py assembles the pack
from the rule modules beside it, and `make policy` runs the same pack against the offline plan:
this file only wires it up.
"""

import sys
from pathlib import Path

# The CLI runs this file as a script from policy/: make `policy.rules` (and the modules it
# imports) importable as a package, the same modules tools/policy_check.py imports.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pulumi_policy import PolicyPack  # noqa: E402

from policy.rules import (  # noqa: E402
    PACK_LEVEL, PACK_NAME, POLICIES, initial_config, show_secrets_as_the_plan_does,
)

show_secrets_as_the_plan_does()
# Each policy's level comes from policy/config.json (the CLI applies --policy-pack-config or a
# policy group's config over it); PACK_LEVEL only for a policy the file does not name.
PolicyPack(name=PACK_NAME, policies=POLICIES, enforcement_level=PACK_LEVEL,
           initial_config=initial_config())
