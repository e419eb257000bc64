#!/usr/bin/python3
"""data_start_bench: launch to first step with the token cache, a 1 MB against a 1 GB JSONL.

Usage: tests/bench/data_start_bench.py --bin-dir build/bin [--big-mb 1024] [--runs 3]

Makes a SentencePiece tokenizer (spm_train on Debian's license texts) and two text-format
JSONL files of those texts (1 MB and --big-mb MB). For each file: one run builds the token
cache (timed: MB/s, and MB/s per core with 1 thread and with all cores), then --runs runs of
`llamafleet-train train` on 2 Gloo ranks (tiny preset, 2 steps) time launch -> the first
metrics line and read rank 0's peak RSS from it. Cache hits on both files must start within
1 s of each other, with peak RSS within 64 MB.
"""
import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "trainer"))
from ranks import rank_env, free_port  # noqa: E402

LICENSES = ["/usr/share/common-licenses/GPL-3", "/usr/share/common-licenses/Apache-2.0"]


def make_jsonl(path, mb, paras):
    rng = random.Random(1)
    target = mb << 20
    with open(path, "w") as f:
        n = 0
        while n < target:
            line = json.dumps({"text": " ".join(rng.choice(paras) for _ in range(3))}) + "\n"
            f.write(line)
            n += len(line)


def first_step(train, spec, cache, threads):
    """(seconds launch -> first metrics line, rank 0 peak RSS bytes) of a 2-rank run."""
    port = free_port()
    t0 = time.time()
    procs = []
    for r in range(2):
        env = rank_env(r, 2, port, extra={"LLAMAFLEET_TOKEN_CACHE_DIR": cache, "OMP_NUM_THREADS": str(threads)})
        procs.append(subprocess.Popen([train, "train", "--spec", spec, "--device", "cpu"], env=env,
                                      stdout=subprocess.PIPE if r == 0 else subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, text=True))
    first, rss = None, None
    for line in procs[0].stdout:
        if first is None and line.startswith("{") and '"metrics"' in line:
            first = time.time() - t0
            rss = json.loads(line)["peak_mem_bytes"]
    for p in procs:
        p.wait(timeout=1800)
        if p.returncode != 0:
            sys.exit("trainer failed (%d) on %s" % (p.returncode, spec))
    return first, rss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin-dir", default=os.path.join(HERE, "..", "..", "build", "bin"))
    ap.add_argument("--big-mb", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    train = os.path.join(a.bin_dir, "llamafleet-train")
    tmp = tempfile.mkdtemp(prefix="data-start-bench-")
    try:
        corpus = os.path.join(tmp, "corpus.txt")
        with open(corpus, "w") as out:
            for f in LICENSES:
                out.write(open(f, errors="replace").read())
        subprocess.run(["spm_train", "--input=" + corpus, "--model_prefix=" + os.path.join(tmp, "sp"),
                        "--vocab_size=1000", "--model_type=bpe", "--character_coverage=1.0", "--minloglevel=2"],
                       check=True, capture_output=True)
        text = open(LICENSES[0], errors="replace").read()
        paras = [p.strip().replace("\n", " ") for p in text.split("\n\n") if p.strip()]
        results = {}
        for mb in (1, a.big_mb):
            data = os.path.join(tmp, "d%d.jsonl" % mb)
            make_jsonl(data, mb, paras)
            spec = os.path.join(tmp, "s%d.yaml" % mb)
            with open(spec, "w") as f:
                f.write("name: start\nmodel: {preset: tiny, tokenizer: %s}\ndata: {train_path: %s, format: TEXT}\n"
                        "training: {max_steps: 2, micro_batch_size: 2, seq_len: 128, log_every: 1}\n"
                        "fsdp: {sharding: FULL_SHARD, mixed_precision: FP32, activation_checkpointing: false}\n"
                        % (os.path.join(tmp, "sp.model"), data))
            builds = {}
            for cores in (1, os.cpu_count()):
                # The build alone, on 1 core (taskset) and on all: the trainer logs its time.
                cache = os.path.join(tmp, "cache-%d-%d" % (mb, cores))
                env = dict(os.environ, LLAMAFLEET_TOKEN_CACHE_DIR=cache)
                p = subprocess.run(["taskset", "-c", ",".join(str(c) for c in range(cores)), train, "train",
                                    "--spec", spec, "--device", "cpu", "--set", "training.max_steps=1"],
                                   env=env, capture_output=True, text=True)
                if p.returncode != 0:
                    sys.exit(p.stderr[-2000:])
                m = re.search(r"tokenized into \S+ in ([0-9.]+) s", p.stderr)
                builds[cores] = float(m.group(1))
            cache = os.path.join(tmp, "cache-%d-%d" % (mb, os.cpu_count()))
            hits = [first_step(train, spec, cache, 1) for _ in range(a.runs)]
            results[mb] = (builds, statistics.median(h[0] for h in hits), statistics.median(h[1] for h in hits))
            os.remove(data)
            print("%d MB done" % mb, file=sys.stderr, flush=True)
        print("data_start_bench: 2 Gloo ranks, tiny preset, text JSONL, seq 128; medians of %d runs; %d cores"
              % (a.runs, os.cpu_count()))
        cores = os.cpu_count()
        print("%8s %12s %12s %22s %18s %12s" % ("JSONL", "build 1 core", "build %d" % cores, "MB/s per core (1/%d)" % cores,
                                                "first step (hit)", "rank 0 RSS"))
        for mb, (builds, start, rss) in results.items():
            print("%6d MB %10.2f s %10.2f s %12.1f / %5.1f %16.2f s %8.0f MiB" % (
                mb, builds[1], builds[cores], mb / builds[1], mb / builds[cores] / cores, start, rss / 2**20))
        small, big = results[1], results[a.big_mb]
        print("hit: %d MB starts %.2f s after 1 MB; RSS %+.0f MiB" % (a.big_mb, big[1] - small[1],
                                                                       (big[2] - small[2]) / 2**20))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
