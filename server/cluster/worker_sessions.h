#ifndef LLAMAFLEET_SERVER_CLUSTER_WORKER_SESSIONS_H_
#define LLAMAFLEET_SERVER_CLUSTER_WORKER_SESSIONS_H_

// One process per worker name: how a hello is judged against the name's current session.
//
// A worker's credential (worker_identity.h) proves the name; it does not tell two processes
// presenting it apart (a second process started with a copied data dir, or a replayed
// credential). Each worker process therefore sends a random Hello.instance_id, fixed for
// the process's life and never stored. The contract:
//
//   kReconnect   the hello's instance is the current session's (both non-empty, or both
//                empty for a worker that sends none): the same process reconnecting, e.g.
//                after its connection broke without a reset. It supersedes the old session
//                (closed ABORTED), and the tasks it lists are the truth: one it does not
//                list gets missing_task_grace to show up as a late status.
//   kRefused     the name's session is live (connected, not lost) and the hello comes from
//                another instance: refused with ALREADY_EXISTS. Nothing of the live session
//                changes: its tasks, attempts and their truth stay as they were. The
//                refused process stops its own trainers (worker/session_hold.h).
//   kNewProcess  the name's previous process is known and not live any more, and the hello
//                is another instance's: the previous process's tasks cannot be reported by
//                this one, so their attempts end at once as a node fault that uses no
//                restart (kNodeDrained, the worker excluded), and none of the tasks this
//                hello lists is held (the worker stops them).
//   kFirst       no previous instance is known (a first hello, or the first after a
//                coordinator restart): as kReconnect.
//
// So a hello never ends a job as the job's fault, whatever it lists: a task the hello
// leaves out is either held by a live session that is untouched (kRefused), ended as a
// node fault (kNewProcess), or, from the process that ran it, released as a node fault
// once missing_task_grace passes (ReleaseAbandoned). And a trainer is never left running
// unheld: the welcome names the tasks the session holds (Welcome.held), and a worker whose
// hello is refused or whose session is superseded stops all of its trainers.

#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/cluster/worker_registry.h"

namespace llamafleet {

enum class HelloVerdict { kFirst, kReconnect, kNewProcess, kRefused };

// `known`: the registry's record of the name (null: never seen). Pure.
HelloVerdict JudgeHello(const LiveWorker* known, const std::string& instance_id);

// The refusal of a second process under `name` while `held`'s session lives: names the
// fix (one process per name; the credential may have been copied).
absl::Status SecondSessionRefused(const std::string& name, const LiveWorker& held, absl::Time now);

// Instance ids: at most this long, printable ASCII (checked before JudgeHello).
absl::Status ValidateInstanceId(const std::string& instance_id);

}  // namespace llamafleet

#endif  // LLAMAFLEET_SERVER_CLUSTER_WORKER_SESSIONS_H_
