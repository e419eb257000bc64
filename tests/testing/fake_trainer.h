#ifndef LLAMAFLEET_TESTS_TESTING_FAKE_TRAINER_H_
#define LLAMAFLEET_TESTS_TESTING_FAKE_TRAINER_H_

// A /bin/sh stand-in for llamafleet-train that behaves like it at the interface the
// coordinator and workers see: the rank environment, --spec, --resume and
// --resume-candidates, JSON metrics and checkpoint events on stdout, SIGTERM.
//
// It runs STEPS steps of 0.1 s; rank 0 reports metrics every step (loss 100 - step % 100) and a
// checkpoint (with its manifest and the job's marker, as the real trainer writes them)
// every CKPT_EVERY steps into the spec's checkpoint.dir; it resumes from --resume DIR/step
// or the newest of --resume-candidates; on SIGTERM it checkpoints and exits 0. Its knobs
// are LLAMAFLEET_FAKE_* variables set on the worker (a trainer sees only the worker's
// LLAMAFLEET_* variables, not its whole environment):
//   LLAMAFLEET_FAKE_STEPS       steps (default 30)
//   LLAMAFLEET_FAKE_CKPT_EVERY  steps between checkpoints (default 10)
//   LLAMAFLEET_FAKE_FAIL        "permanent": an INVALID_ARGUMENT error event, exit 1
//   LLAMAFLEET_FAKE_PEER_DIR    each rank writes its pid to DIR/<MASTER_PORT>-<RANK>.pid and
//                               fails (UNAVAILABLE, as a broken collective) once another rank
//                               of its gang is gone
//   LLAMAFLEET_FAKE_SAMPLES_EVERY  rank 0 prints two "sample" lines (eval.samples) every N
//                               steps: index 0 {prompt "Q0", text "step S answer 0", reference
//                               "step S answer 0", scores exact_match 1} and index 1 (no
//                               reference); at the first, also index 2: a hostile line with a
//                               40000-byte text and 12 scores
//   LLAMAFLEET_FAKE_DPO         "1": metrics lines carry DPO rewards (chosen = step / 10,
//                               rejected = -step / 20, accuracies 0.75, margins their difference)
// Every rank's command line is "sh TRAINER train ...": CountTrainerProcesses finds them.

#include <string>

namespace llamafleet::testing {

// Writes the fake trainer to `dir`/fake-train.sh (mode 0700); its path.
std::string WriteFakeTrainer(const std::string& dir);

// Live (not zombie) processes started from `trainer` with "train" as their first argument
// (the workers' own command lines name the trainer too, but not followed by "train").
int CountTrainerProcesses(const std::string& trainer);

}  // namespace llamafleet::testing

#endif  // LLAMAFLEET_TESTS_TESTING_FAKE_TRAINER_H_
