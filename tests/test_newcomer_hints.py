"""The hints a newcomer meets first say what works (issue 41 §3; RE-12 of the fourth ecosystem
review): `make diff CONFIG_BASE=HEAD:<file>` of a stack file that was never committed. Each
message names the value and a fix that is then shown to work."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tools import cli, config_diff, plan
from tools.plan import ROOT


def _git(repo, *args):
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_an_uncommitted_stack_file_as_the_config_base_is_answered_with_a_copy(tmp_path, monkeypatch):
    """CONFIG_BASE=HEAD:Pulumi.dev.yaml for a file in the work tree but not at HEAD: the error
    says it is not committed and to pass a copy of it (another ref could not help: git's own
    hint, HEAD~1, has no such file either), and that copy is then accepted."""
    _git(tmp_path, "init", "-q")
    shutil.copy(ROOT / "Pulumi.a4.yaml", tmp_path / "Pulumi.a4.yaml")
    _git(tmp_path, "add", "Pulumi.a4.yaml")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "a4")
    shutil.copy(ROOT / "Pulumi.a4.yaml", tmp_path / "Pulumi.dev.yaml")
    monkeypatch.setattr(config_diff, "ROOT", tmp_path)
    with pytest.raises(plan.StackFileError) as refused:
        config_diff.config_at("HEAD:Pulumi.dev.yaml", tmp_path / "scratch", "dev")
    message = str(refused.value)
    assert "CONFIG_BASE='HEAD:Pulumi.dev.yaml'" in message
    assert "Pulumi.dev.yaml is not committed at HEAD" in message
    assert "`cp Pulumi.dev.yaml Pulumi.dev.yaml.orig`" in message
    assert "make diff STACK=dev CONFIG_BASE=Pulumi.dev.yaml.orig" in message
    assert "HEAD~1" not in message
    monkeypatch.chdir(tmp_path)
    shutil.copy(tmp_path / "Pulumi.dev.yaml", tmp_path / "Pulumi.dev.yaml.orig")
    assert config_diff.config_at("Pulumi.dev.yaml.orig", tmp_path / "scratch")[0].is_file()
    # A committed file still comes from git; a ref git cannot resolve keeps git's reason.
    assert config_diff.config_at("HEAD:Pulumi.a4.yaml", tmp_path / "scratch")[0].is_file()
    with pytest.raises(cli.UsageError, match="git cannot use it"):
        config_diff.config_at("no-such-ref:Pulumi.a4.yaml", tmp_path / "scratch")
