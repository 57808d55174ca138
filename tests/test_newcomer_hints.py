"""The hints a newcomer meets first say what works (issue 41 §3; RE-12 and RE-14 of the fourth
ecosystem review): `make diff CONFIG_BASE=HEAD:<file>` of a stack file that was never committed,
and a project renamed by `pulumi new` planning the shipped stack files, written for `verl-gke:`.
Each message names the value and a fix that is then shown to work."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

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


def test_a_renamed_project_is_told_how_to_rename_the_shipped_stack_files(tmp_path, monkeypatch, capsys):
    """In a project named my-rl, the shipped Pulumi.a4.yaml (keys under verl-gke:) stops the
    plan at `my-rl:target` missing, as the CLI does; the message gives the command that renames
    the file's keys, and after running it the stack's config reads as the project's own."""
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    project["name"] = "my-rl"
    (tmp_path / "Pulumi.yaml").write_text(yaml.safe_dump(project, sort_keys=False))
    shutil.copy(ROOT / "Pulumi.a4.yaml", tmp_path / "Pulumi.a4.yaml")
    monkeypatch.setattr(plan, "ROOT", tmp_path)
    assert cli.run(plan.main, ["--stack", "a4", "--out", str(tmp_path / "build"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "missing configuration values: my-rl:target" in err and "Traceback" not in err
    command = "sed -i.bak 's/verl-gke:/my-rl:/g' Pulumi.a4.yaml"
    assert f"`{command}`" in err
    subprocess.run(command, shell=True, cwd=tmp_path, check=True)
    assert plan.stack_inputs("a4").config["my-rl:target"] == "a4"


def test_the_rename_hint_is_only_for_the_templates_keys(tmp_path, monkeypatch):
    """A stack file that lacks the target under every name gets no rename hint: nothing to
    rename, only the key to set."""
    (tmp_path / "Pulumi.yaml").write_text(
        (ROOT / "Pulumi.yaml").read_text().replace("name: verl-gke", "name: my-rl", 1))
    (tmp_path / "Pulumi.bare.yaml").write_text("config: {}\n")
    monkeypatch.setattr(plan, "ROOT", tmp_path)
    with pytest.raises(plan.MissingConfig) as missing:
        plan.stack_inputs("bare")
    assert "my-rl:target" in str(missing.value) and "sed" not in str(missing.value)
