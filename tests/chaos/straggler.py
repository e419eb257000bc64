"""The straggler_restart_without scenario of the chaos harness (chaos.py registers it).

One rank is made slow by SIGSTOP/SIGCONT cycles (stopped STOP_S of every CYCLE_S) while
its peer waits for it in every collective. The coordinator runs with a small straggler
rule (FACTOR x the other rank's busy time a step, ROUNDS rounds in a row) and the default queue's straggler_policy restart-without
(a config file). Checked after the job ended:

  flagged     a "straggler" event names the slowed rank's worker
  restarted   the attempt ended as a node fault naming that worker, no restart used
              (restarts 0), and the job finished on the other two workers (the harness's
              weights invariant: the uninterrupted run's loss)
"""

import os
import signal
import threading
import time

ROUNDS = 3
FACTOR = 1.5  # the slowed rank also waits in collectives while stopped: its busy ratio is not the stop's
CYCLE_S = 0.25
STOP_S = 0.2


def coord_args(root):
    path = os.path.join(root, "coordinator.yaml")
    with open(path, "w") as f:
        f.write("queues:\n  default: {gpu_quota: 0, straggler_policy: restart-without}\n")
    return ["--config", path, "--straggler-rounds", str(ROUNDS), "--straggler-factor", str(FACTOR)]


def fault(scenario, c, job_id):
    found = scenario.victim_trainer(c, job_id, "slowed")
    if found is None:
        return
    victim, pid = found
    scenario.slow_victim = victim

    def cycle():
        try:
            while True:
                os.kill(pid, signal.SIGSTOP)
                time.sleep(STOP_S)
                os.kill(pid, signal.SIGCONT)
                time.sleep(CYCLE_S - STOP_S)
        except OSError:  # the process is gone
            pass

    threading.Thread(target=cycle, daemon=True).start()
    scenario.fault_time = time.time()


def check(scenario, c, job_id, parse_time):
    victim = getattr(scenario, "slow_victim", None)
    if victim is None:
        return
    flagged = restarting = None
    for e in c.events(job_id):
        if parse_time(e["time"]) < scenario.fault_time:
            continue
        if e.get("type") == "straggler" and flagged is None:
            flagged = e
        if e.get("to_state") == "RESTARTING" and restarting is None:
            restarting = e
    if flagged is None:
        scenario.problems.append("straggler: no straggler event after %s was slowed" % victim)
        return
    scenario.notes.append("straggler flagged %.1f s after the slowing began: %s" % (
        parse_time(flagged["time"]) - scenario.fault_time, flagged.get("reason")))
    if ("on worker %s " % victim) not in flagged.get("reason", ""):
        scenario.problems.append("straggler: the event does not name worker %s: %s" % (victim, flagged.get("reason")))
    if restarting is None or ("restarting without worker %s" % victim) not in restarting.get("reason", ""):
        scenario.problems.append("straggler: no restart without %s: %s" % (
            victim, restarting.get("reason") if restarting else None))
    j = c.job(job_id)
    if int(j.get("restarts", 0)) != 0:
        scenario.problems.append("straggler: restart-without used a restart (restarts %s)" % j.get("restarts"))
    if victim in j.get("workers", []):
        scenario.problems.append("straggler: the restart ran on the slow worker %s again" % victim)
