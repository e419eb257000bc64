#!/usr/bin/python3
"""checkpoint_bench: how long checkpoints block training, asynchronous vs synchronous, and
how fast the background writer writes against `dd conv=fsync` of the same bytes.

Usage: tests/bench/checkpoint_bench.py --bin-dir build/bin [--runs 3] [--dir DIR] [--ranks 2]

2 Gloo ranks of `sharded_rank` (--ranks 1 leaves a core of a 2-core machine to the
writer), FULL_SHARD fp32, a 26M-parameter model (checkpoints of ~386 MiB: fp32
parameters and both AdamW moments), 27 steps. Three runs side by side, in rotating
order: no checkpoints, a checkpoint every 2 steps written in the background (the
default; 13 saves, the last after step 26), and the same with `--sync-checkpoint`
(checkpoint.async: false). Figures, medians over --runs:
  blocked per save   (wall time of the run - wall time without checkpoints) / saves, of
                     the medians and paired by round; and what the step loop itself
                     measured waiting (snapshot + waits)
  write throughput   checkpoint bytes / rank 0's write time (start to manifest), against
                     dd of the same bytes, bs=1M conv=fsync, on the same filesystem: of the
                     background saves (whose writer runs at the lowest CPU priority, on
                     what the ranks leave) and of the synchronous ones (the cores free)
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "trainer"))
from ranks import json_lines, launch_ranks  # noqa: E402

SHAPE = ["--hidden", "512", "--layers", "8", "--heads", "8", "--kv-heads", "8", "--ffn", "1376",
         "--vocab", "8192", "--seq-len", "64", "--micro-batch", "2", "--grad-accum", "1", "--global-rows", "4",
         "--strategy", "FULL_SHARD"]
# 13 saves a run: the wall-time difference of a few saves is within this VM's run-to-run
# noise (a few tenths of a second over 10 s). The last step is not a checkpoint step: a
# save at the end of training is waited for whole in either mode (the run ends only once
# it is durable), which is the end of the job, not training blocked.
STEPS, EVERY = 27, 2


def run(rank_bin, out, extra, ranks=2):
    argv = [rank_bin, "--steps", str(STEPS), "--out", out] + SHAPE + extra
    procs = launch_ranks(argv, ranks)
    outs = []
    for p in procs:
        o, err = p.communicate(timeout=1200)
        if p.returncode != 0:
            sys.exit(f"rank failed ({p.returncode}): {' '.join(argv)}\n{err[-3000:]}")
        outs.append(o)
    reps = [json.load(open(os.path.join(out, f"rank-{r}.json"))) for r in range(ranks)]
    saves = [l for l in json_lines(outs[0]) if l.get("event") == "checkpoint_saved"]
    return max(r["seconds"] for r in reps), max(r["checkpoint_blocked_seconds"] for r in reps), saves


def dd_seconds(directory, nbytes):
    path = os.path.join(directory, "dd.bin")
    r = subprocess.run(["dd", "if=/dev/zero", f"of={path}", "bs=1M", f"count={max(1, nbytes >> 20)}",
                        "conv=fsync"], capture_output=True, text=True, check=True)
    os.remove(path)
    m = re.search(r"([0-9.]+) s,", r.stderr)
    return float(m.group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "..", "build", "bin"))
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default=None, help="filesystem to write on (default: a temporary directory)")
    ap.add_argument("--ranks", type=int, default=2, help="Gloo ranks (one OpenMP thread each)")
    a = ap.parse_args()
    rank_bin = os.path.join(a.bin_dir, "sharded_rank")
    wall = {"none": [], "async": [], "sync": []}
    blocked = {"async": [], "sync": []}
    write_s = {"async": [], "sync": []}
    sizes = []
    med = statistics.median
    tmp = tempfile.mkdtemp(prefix="checkpoint-bench-", dir=a.dir)
    try:
        modes = [("none", []), ("async", ["--checkpoint-every", str(EVERY)]),
                 ("sync", ["--checkpoint-every", str(EVERY), "--sync-checkpoint"])]
        for i in range(a.runs):
            # Each round starts with another mode, so no mode always follows the same one.
            for mode, extra in modes[i % 3:] + modes[:i % 3]:
                ck = os.path.join(tmp, f"ck-{mode}-{i}")
                if mode != "none":
                    extra = extra + ["--checkpoint-dir", ck]
                secs, blk, saves = run(rank_bin, os.path.join(tmp, f"out-{mode}-{i}"), extra, a.ranks)
                wall[mode].append(secs)
                if mode != "none":
                    blocked[mode].append(blk)
                    assert len(saves) == STEPS // EVERY, saves
                    write_s[mode].extend(s["write_seconds"] for s in saves)
                    if mode == "async":
                        sizes.append(saves[0]["bytes"])
                shutil.rmtree(ck, ignore_errors=True)
            print(f"run {i + 1}/{a.runs}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in wall.items()),
                  file=sys.stderr, flush=True)
        # dd after the timed runs, not between them: its write would land in the next run.
        dd_s = [dd_seconds(tmp, int(med(sizes))) for _ in range(a.runs)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    saves = STEPS // EVERY
    base = med(wall["none"])
    nbytes = med(sizes)
    print(f"checkpoint_bench: {a.ranks} Gloo rank(s), FULL_SHARD fp32, 26M parameters, {STEPS} steps, a save every {EVERY} "
          f"({saves} saves of {nbytes / 2**20:.0f} MiB); medians of {a.runs} runs; {os.cpu_count()} cores")
    print(f"{'mode':<8}{'wall s':>9}{'blocked/save (wall)':>22}{'blocked/save (loop)':>22}")
    print(f"{'none':<8}{base:>9.2f}")
    per = {}
    for mode in ("async", "sync"):
        per[mode] = (med(wall[mode]) - base) / saves
        print(f"{mode:<8}{med(wall[mode]):>9.2f}{per[mode]:>20.3f} s{med(blocked[mode]) / saves:>20.3f} s")
    print(f"async / sync blocked per save: {per['async'] / per['sync']:.3f} (wall), "
          f"{med(blocked['async']) / med(blocked['sync']):.3f} (loop)")
    # Paired by round (each mode minus the no-checkpoint run just before it), which cancels
    # the drift of a VM's speed between rounds; the range shows what noise remains.
    paired = {m: sorted((w - n) / saves for w, n in zip(wall[m], wall["none"])) for m in ("async", "sync")}
    for mode in ("async", "sync"):
        print(f"{mode} blocked per save, paired by round: median {med(paired[mode]):.3f} s "
              f"(range {paired[mode][0]:.3f} to {paired[mode][-1]:.3f})")
    print(f"async / sync, paired medians: {med(paired['async']) / med(paired['sync']):.3f}")
    d = med(dd_s)
    print(f"dd conv=fsync of the same bytes: {nbytes / d / 2**20:.0f} MiB/s ({d:.2f} s)")
    for mode, what in (("async", "background write (lowest priority, beside the ranks)"),
                       ("sync", "synchronous write (cores free)")):
        w = med(write_s[mode])
        print(f"{what}: {nbytes / w / 2**20:.0f} MiB/s ({w:.2f} s); writer / dd = {d / w:.2f}")
    print(f"synchronous save blocked {med(blocked['sync']) / saves:.2f} s per save = "
          f"{med(blocked['sync']) / saves / d:.2f}x dd")


if __name__ == "__main__":
    main()
