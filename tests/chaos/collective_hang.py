"""The hang_in_collective scenario of the chaos harness (chaos.py registers it).

A rank is SIGSTOPped mid-run and never continued: its peer blocks in the next collective
(an all-reduce every step) and waits; the trainers' own collective timeout (120 s) is far
away. The coordinator runs with a small hang floor (COORD_ARGS), so the gang is hung once
nothing moved for max(floor, factor x median step time). Checked after the job ended:

  detected   the attempt ended within the bound (floor + the slack of progress reports
             and heartbeats) of the stop, its reason "hung: ..." names the stopped rank's
             worker
  node fault the job restarted as a node fault: no restart used (restarts 0), the stopped
             worker left out of the next attempt (the job finished on the other two)
"""

import os
import signal
import time

HANG_FLOOR_S = 5
# Progress lines every second, heartbeats every 0.5 s, the loop's tick, the peer's last
# report: what detection may take beyond the floor.
DETECT_SLACK_S = 6
COORD_ARGS = ["--hang-floor", str(HANG_FLOOR_S)]


def fault(scenario, c, job_id):
    found = scenario.victim_trainer(c, job_id, "stopped")
    if found is None:
        return
    victim, pid = found
    scenario.hang_victim = victim
    os.kill(pid, signal.SIGSTOP)  # never continued: the restart's cancel SIGKILLs it
    scenario.fault_time = time.time()


def check(scenario, c, job_id, parse_time):
    victim = getattr(scenario, "hang_victim", None)
    if victim is None:
        return
    ended = None
    for e in c.events(job_id):
        if e.get("to_state") == "RESTARTING" and parse_time(e["time"]) >= scenario.fault_time:
            ended = e
            break
    if ended is None:
        scenario.problems.append("hang: no restart after the rank was stopped")
        return
    reason = ended.get("reason", "")
    took = parse_time(ended["time"]) - scenario.fault_time
    scenario.notes.append("hang detected %.1f s after SIGSTOP (floor %d s): %s" % (took, HANG_FLOOR_S, reason))
    if not reason.startswith("hung:") or ("on worker %s " % victim) not in reason:
        scenario.problems.append("hang: the failure does not name worker %s: %s" % (victim, reason))
    if took > HANG_FLOOR_S + DETECT_SLACK_S:
        scenario.problems.append("hang: detected after %.1f s, bound %d s" % (took, HANG_FLOOR_S + DETECT_SLACK_S))
    j = c.job(job_id)
    if int(j.get("restarts", 0)) != 0:
        scenario.problems.append("hang: the node fault used a restart (restarts %s)" % j.get("restarts"))
    if victim in j.get("workers", []):
        scenario.problems.append("hang: the restart ran on the stopped worker %s again: %s" % (victim, j.get("workers")))
