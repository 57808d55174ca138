"""What keeps the offline plan near its SDK import floor (issue 20 §9, `make bench`), and what
its measurement relies on."""

from __future__ import annotations

import sys

import pytest
import yaml

from bench import plan_bench
from tests.conftest import rendered
from tools import plan


def test_manifests_load_back_to_exactly_the_recorded_objects(program):
    """manifests.yaml, written by libyaml's emitter, holds every Kubernetes object the program
    creates, in its resource's URN order and unchanged: the same objects the pure-Python
    emitter's text loads to (the two fold long strings differently)."""
    _, _, _, recording = program
    objects = plan.kubernetes_objects(recording)
    written = list(yaml.safe_load_all(plan.manifests_text(objects)))
    assert written == objects
    assert sorted(map(repr, objects)) == sorted(map(repr, recording.kubernetes_objects()))
    assert written == list(yaml.safe_load_all(yaml.safe_dump_all(objects, sort_keys=True)))


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="this PyYAML build has no libyaml")
def test_writing_a_plan_does_not_run_the_pure_python_yaml_emitter(monkeypatch, tmp_path):
    """The plan writes manifests.yaml through libyaml where PyYAML has it (every PyYAML wheel
    does): the pure-Python emitter took 0.07 s CPU of a4's plan, libyaml takes 0.006 s."""

    def refuse(*_args, **_kwargs):
        raise AssertionError("the pure-Python YAML emitter ran")

    a4 = rendered("a4", "standard")
    monkeypatch.setattr(yaml.emitter.Emitter, "emit", refuse)
    monkeypatch.setattr(plan, "run_program", lambda *_args, **_kwargs: a4)
    assert plan.write_plan("a4", None, tmp_path, quiet=True) == 0
    assert list(yaml.safe_load_all((tmp_path / "a4" / "manifests.yaml").read_text()))


def test_the_bench_warm_up_writes_byte_code_where_the_environment_forbids_it(monkeypatch, tmp_path):
    """The run that lists the plan's modules leaves the timed tree's own modules byte-compiled
    even under PYTHONDONTWRITEBYTECODE=1, so the timed plans read `__pycache__` as a user's
    second `make plan` does, instead of compiling every module of ours from source each time."""
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "__init__.py").write_text("")
    (tools / "imported_by_the_plan.py").write_text("VALUE = 1\n")
    (tools / "plan.py").write_text("def main(argv):\n    import tools.imported_by_the_plan\n")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    plan_bench.sdk_modules("a4", str(tmp_path / "out"), tmp_path)
    tag = sys.implementation.cache_tag
    assert (tools / "__pycache__" / f"imported_by_the_plan.{tag}.pyc").is_file()


def test_the_plan_freezes_what_exists_before_the_program_runs(monkeypatch, tmp_path):
    """write_plan freezes the collector's heap before it runs the program, so that the run's
    full collections skip what was alive before it (a4: one full pass of 0.23-0.3 s CPU over
    the imported SDKs' objects no longer falls within the run)."""
    a4 = rendered("a4", "standard")
    calls: list[str] = []
    monkeypatch.setattr(plan.gc, "freeze", lambda: calls.append("freeze"))
    monkeypatch.setattr(plan, "run_program", lambda *_args, **_kwargs: calls.append("run") or a4)
    assert plan.write_plan("a4", None, tmp_path, quiet=True) == 0
    assert calls == ["freeze", "run"]


def test_a_mock_run_sends_no_stack_traces_and_nothing_reads_them():
    """tools/mockrun.py has the SDK's _get_stack_trace return an empty trace while a program
    runs under mocks, and puts it back after. That changes nothing the plan shows only as long
    as the SDK calls it by that module-global name from register_resource and read_resource
    (else the patch stops working: this fails first) and neither mock monitor reads the
    request's stackTrace or sourcePosition (else the plan would lose them)."""
    import inspect

    from pulumi.runtime import mocks as pulumi_mocks
    from pulumi.runtime import resource as pulumi_resource
    from pulumi.runtime.proto import source_pb2

    from tools import mockrun

    for function in (pulumi_resource.register_resource, pulumi_resource.read_resource):
        assert "= _get_stack_trace()" in inspect.getsource(function), function.__name__
    assert not inspect.signature(pulumi_resource._get_stack_trace).parameters
    for monitor in (pulumi_mocks.MockMonitor, mockrun.RecordingMonitor):
        source = inspect.getsource(monitor)
        assert "stackTrace" not in source and "sourcePosition" not in source, monitor.__name__

    sdk_own = pulumi_resource._get_stack_trace
    seen = []
    mockrun.run(lambda: seen.append(pulumi_resource._get_stack_trace))
    assert seen == [source_pb2.StackTrace] and seen[0]() == source_pb2.StackTrace()
    assert pulumi_resource._get_stack_trace is sdk_own  # put back after the run
