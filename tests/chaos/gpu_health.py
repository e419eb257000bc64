"""The gpu_health_drain scenario of the chaos harness (chaos.py registers it).

Every worker starts with the test-only knobs (worker_args): --gpu-health-fake-for-test (a
GPU health event reported in heartbeats while its file exists) and
--preflight-fail-for-test (every pre-flight fails while its file exists). After the first
checkpoint the victim (a worker running one of the job's ranks) gets both: its pre-flight
set to fail, then a fatal XID on its GPU 0. Checked after the job ended:

  drained     the victim is DRAINING, source gpu-health, the reason naming GPU 0 and XID 79,
              and still so after its between-attempts pre-flight, which failed
  node fault  the running attempt ended as a node fault naming the drain, no restart used
              (restarts 0); the job finished on the other two workers (the harness's
              weights invariant: the uninterrupted run's loss)
  placements  no attempt after the fault was placed on the victim
"""

import os
import time


def _fake(root, name):
    return os.path.join(root, "gpu-fake-" + name)


def _knob(root, name):
    return os.path.join(root, "preflight-fail-" + name)


def worker_args(root, name):
    return ["--gpu-health-fake-for-test", _fake(root, name), "--preflight-fail-for-test", _knob(root, name)]


def fault(scenario, c, job_id):
    victim = scenario.victim(c, job_id)
    scenario.gpu_victim = victim
    # Pre-flights are told apart by their sequence: their reported time has whole seconds.
    scenario.gpu_preflight_before = int(_worker(c, victim).get("preflight", {}).get("sequence", 0))
    # The knob first: the pre-flight the worker runs once its task has stopped must fail.
    with open(_knob(c.root, victim), "w") as f:
        f.write("sick\n")
    with open(_fake(c.root, victim), "w") as f:
        f.write("xid 79 gpu 0\n")
    scenario.fault_time = time.time()


def _worker(c, name):
    for w in c.api("GET", "workers").get("workers", []):
        if w.get("name") == name:
            return w
    return {}


def check(scenario, c, job_id, parse_time):
    victim = getattr(scenario, "gpu_victim", None)
    if victim is None:
        return
    p = scenario.problems
    # Its between-attempts pre-flight reported (after the fault), failed, and the drain stands.
    deadline = time.time() + 15
    w = _worker(c, victim)
    while time.time() < deadline:
        w = _worker(c, victim)
        pre = w.get("preflight", {})
        if int(pre.get("sequence", 0)) > scenario.gpu_preflight_before:
            break
        time.sleep(0.2)
    drain, pre = w.get("drain", {}), w.get("preflight", {})
    if w.get("state") != "WORKER_DRAINING" or drain.get("source") != "gpu-health":
        p.append("gpu health: %s is %s, drain %s; expected DRAINING by gpu-health" % (victim, w.get("state"), drain))
    if "GPU 0: XID 79" not in drain.get("reason", ""):
        p.append("gpu health: the drain does not name GPU 0 and XID 79: %s" % drain.get("reason"))
    if int(pre.get("sequence", 0)) <= scenario.gpu_preflight_before or pre.get("passed"):
        p.append("gpu health: no failed pre-flight of %s after the fault: %s" % (victim, pre))
    else:
        scenario.notes.append("gpu health: %s drained (%s), its pre-flight after the job: failed" % (
            victim, drain.get("reason")))
    restarting = None
    for e in c.events(job_id):
        if e.get("to_state") == "RESTARTING" and parse_time(e["time"]) >= scenario.fault_time:
            restarting = e
            break
    expected = "worker %s drained (gpu-health): GPU 0: XID 79" % victim
    if restarting is None or expected not in restarting.get("reason", ""):
        p.append("gpu health: no restart for the drain (%s): %s" % (
            expected, restarting.get("reason") if restarting else None))
    else:
        scenario.notes.append("gpu health: restarted %.1f s after the XID" % (
            parse_time(restarting["time"]) - scenario.fault_time))
    j = c.job(job_id)
    if int(j.get("restarts", 0)) != 0:
        p.append("gpu health: the node fault used a restart (restarts %s)" % j.get("restarts"))
    attempts = c.api("GET", "jobs/%s/attempts" % job_id).get("attempts", [])
    ended = [a for a in attempts if a.get("failure_class") == "node_fault"]
    if not ended:
        p.append("gpu health: no attempt ended as a node fault: %s" % [a.get("failure_class") for a in attempts])
    for a in attempts:
        if int(a.get("attempt", 0)) > scenario.fault_attempt:
            workers = [t.get("worker") for t in a.get("tasks", [])]
            if victim in workers:
                p.append("gpu health: attempt %s was placed on the drained %s: %s" % (a.get("attempt"), victim, workers))
