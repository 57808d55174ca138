"""How tests/data/supervisor-records-789f86a.json was made: the records the supervisor of
789f86a (before components/supervisor/run_state.py) saved, one per state a run can be in, by
ticks on tests/fakes. To make it again, from a checkout of that commit:
    python tests/data/supervisor_records_789f86a.py > tests/data/supervisor-records-789f86a.json
(run on later code it writes that code's records, not these). Not a test: nothing imports it.
"""
import json, sys
from pathlib import Path
import tempfile
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from components.supervisor import protocol, supervisor
from components.supervisor.protocol import attempt_id
from tests.fakes.cluster import FileCluster
from tests.fakes.ray_jobs import FakeRay, FakeJobs
from tests.test_supervisor_ticks import RUN, spec, step, submit, tick

out = {}
def world():
    d = Path(tempfile.mkdtemp())
    return FakeRay(), FileCluster(d / "objects", "grpo-supervisor-state", "rc")

def keep(name, cluster, run_spec):
    out[name] = {"spec": {k: run_spec[k] for k in ("max_retries", "max_preemptions", "export", "release_gpus", "stall_s", "deadline_s") if k in run_spec},
                 "record": cluster.record()}

ray, c = world(); s = spec()
a0 = submit(ray); ray.run(a0); ray.log(a0, step(3)); tick(ray, c, s); keep("running", c, s)
ray, c = world(); s = spec()
a0 = submit(ray); tick(ray, c, s); keep("pending", c, s)
ray, c = world(); s = spec()
a0 = submit(ray); ray.run(a0); ray.log(a0, step(7)); ray.finish(a0, "FAILED"); tick(ray, c, s); keep("failed-resubmitted", c, s)
# a stall stop saved, the stop not made (tick died on the stop)
ray, c = world(); s = spec(stall_s=5)
a0 = submit(ray); ray.run(a0)
orig = FakeJobs.stop
FakeJobs.stop = lambda self: (_ for _ in ()).throw(OSError("killed"))
try: tick(ray, c, s, now=ray.clock + 10)
except OSError: pass
FakeJobs.stop = orig
keep("stall-stop-saved", c, s)
# stall stop made, STOPPED ours seen but the mark is new: waiting (max_retries 0, mark)
ray, c = world(); s = spec(stall_s=5, max_retries=0)
c.mark({"run": RUN, "at": 1.0, "ended": None})
a0 = submit(ray); ray.run(a0); tick(ray, c, s, now=ray.clock + 10)
c.mark({"run": RUN, "at": 2.0, "ended": None})
tick(ray, c, s, now=ray.clock + 11); keep("stalled-waiting-for-mark", c, s)
ray, c = world(); s = spec()
a0 = submit(ray); ray.finish(a0, "STOPPED"); tick(ray, c, s); keep("stopped-by-someone", c, s)
ray, c = world(); s = spec(max_retries=0)
a0 = submit(ray); ray.finish(a0, "FAILED"); tick(ray, c, s); tick(ray, c, s); keep("budget-released", c, s)
ray, c = world(); s = spec(max_retries=0, release_gpus=False)
a0 = submit(ray); ray.finish(a0, "FAILED"); tick(ray, c, s); tick(ray, c, s); keep("budget-kept", c, s)
ray, c = world(); s = spec()
a0 = submit(ray); ray.run(a0); tick(ray, c, s, now=ray.clock + 3601); keep("deadline-stopped", c, s)
tick(ray, c, s, now=ray.clock + 3700); keep("deadline-released", c, s)
ray, c = world(); s = spec(export={"entrypoint": "merge"})
a0 = submit(ray); ray.finish(a0, "SUCCEEDED"); tick(ray, c, s); keep("exporting", c, s)
ray.finish(attempt_id(protocol.export_run(RUN), 0), "SUCCEEDED"); tick(ray, c, s); keep("exported-released", c, s)
ray, c = world(); s = spec(export={"entrypoint": "merge"}, max_retries=0)
a0 = submit(ray); ray.finish(a0, "SUCCEEDED"); tick(ray, c, s)
ray.finish(attempt_id(protocol.export_run(RUN), 0), "FAILED"); tick(ray, c, s); keep("export-failed-released", c, s)
ray, c = world(); s = spec(export={"entrypoint": "merge"})
a0 = submit(ray); ray.finish(a0, "SUCCEEDED"); tick(ray, c, s)
ray.finish(attempt_id(protocol.export_run(RUN), 0), "STOPPED"); tick(ray, c, s); keep("export-stopped-by-someone", c, s)
ray, c = world(); s = spec(release_gpus=False)
a0 = submit(ray); ray.finish(a0, "SUCCEEDED"); tick(ray, c, s); keep("succeeded-kept", c, s)
ray, c = world(); s = spec()
a0 = submit(ray); c.mark({"run": RUN, "at": 1.0, "ended": "deleted (destroy or replace)"}); ray.finish(a0, "FAILED"); tick(ray, c, s); keep("ended-by-pulumi", c, s)
ray, c = world(); s = spec()
a0 = submit(ray); c.mark({"run": "verl-gke-test-grpo-ba9876543210", "at": 1.0, "ended": None}); tick(ray, c, s); keep("superseded", c, s)
ray, c = world(); s = spec()
a0 = submit(ray); ray.run(a0); ray.log(a0, step(12)); tick(ray, c, s); ray.restart_head(); tick(ray, c, s); keep("lost-resubmitted", c, s)
# lost and the mark is new with no budget: LOST waiting
ray, c = world(); s = spec(max_retries=0)
c.mark({"run": RUN, "at": 1.0, "ended": None})
a0 = submit(ray); ray.run(a0); tick(ray, c, s); ray.restart_head(); c.mark({"run": RUN, "at": 2.0, "ended": None}); tick(ray, c, s); keep("lost-waiting-for-mark", c, s)
# a dead tick's submission intent
ray, c = world(); s = spec()
a0 = submit(ray); ray.finish(a0, "FAILED")
orig_submit = protocol.submit_attempt
protocol.submit_attempt = lambda *a, **k: (_ for _ in ()).throw(TimeoutError("killed"))
try: tick(ray, c, s)
except TimeoutError: pass
protocol.submit_attempt = orig_submit
keep("submit-intent", c, s)
# a dead tick's release intent
ray, c = world(); s = spec()
a0 = submit(ray); ray.finish(a0, "SUCCEEDED")
orig_suspend = c.suspend
def die(): raise OSError("lost")
c.suspend = die
try: tick(ray, c, s)
except OSError: pass
c.suspend = orig_suspend
keep("release-intent", c, s)
# a dead tick's export intent
ray, c = world(); s = spec(export={"entrypoint": "merge"})
a0 = submit(ray); ray.finish(a0, "SUCCEEDED")
protocol.submit_attempt = lambda *a, **k: (_ for _ in ()).throw(TimeoutError("killed"))
try: tick(ray, c, s)
except TimeoutError: pass
protocol.submit_attempt = orig_submit
keep("export-intent", c, s)
# preempted, resumed
ray, c = world(); s = spec(max_retries=0)
a0 = submit(ray); ray.run(a0); ray.lose_node(a0); tick(ray, c, s); keep("preempted-resubmitted", c, s)
ray, c = world(); s = spec(max_retries=5, max_preemptions=0)
a0 = submit(ray); ray.run(a0); ray.lose_node(a0); tick(ray, c, s); tick(ray, c, s); keep("preemption-budget-released", c, s)
# unknown ending, asked once
ray, c = world(); s = spec(max_retries=0)
a0 = submit(ray); ray.run(a0); ray.lose_node(a0)
orig_nodes = FakeJobs.nodes
FakeJobs.nodes = lambda self: (_ for _ in ()).throw(RuntimeError("listing nodes answered HTTP 500"))
tick(ray, c, s)
FakeJobs.nodes = orig_nodes
keep("unknown-ending", c, s)
ray, c = world(); s = spec(max_retries=0)
a0 = submit(ray); ray.finish(a0, "FAILED"); tick(ray, c, s); keep("failed-waiting-for-next-tick", c, s)
# released, then an explicit up changed the mark (reopened on next tick): keep the released one
json.dump(out, sys.stdout, indent=1, sort_keys=True)
