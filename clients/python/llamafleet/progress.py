"""What Client.wait shows while a job runs: a tqdm bar (step/total, loss, tokens/s) when
tqdm is importable and the stream is a terminal, otherwise one line per change ("job 3
RUNNING step 20/60 loss 2.3140 1,234 tok/s"), like the CLI's `watch` through a pipe."""

import sys
from typing import Optional, TextIO

from llamafleet.v1 import job_pb2


def state_name(state: int) -> str:
    """A JobState number as its name ("RUNNING")."""
    try:
        return job_pb2.JobState.Name(state)
    except ValueError:
        return str(state)


def metrics_text(point) -> str:
    """'step 20/60 loss 2.3140 1,234 tok/s' of a JobMetricsPoint ('' before the first step)."""
    if point is None or point.step == 0:
        return ""
    parts = ["step %d/%d" % (point.step, point.total_steps) if point.total_steps else "step %d" % point.step,
             "loss %.4f" % point.loss]
    if point.HasField("eval_loss"):
        parts.append("eval %.4f" % point.eval_loss)
    if point.tokens_per_second > 0:
        parts.append("{:,.0f} tok/s".format(point.tokens_per_second))
    return " ".join(parts)


def _status_text(job) -> str:
    text = "job %s %s" % (job.id, state_name(job.state))
    if job.state == job_pb2.QUEUED and job.pending.message:
        text += ": " + job.pending.message
    return text


class Progress:
    """Shows one job's progress on `stream` (default stderr). update() with each fresh look
    at the job; close() once done. enabled=False shows nothing."""

    def __init__(self, enabled: bool = True, stream: Optional[TextIO] = None):
        self._stream = stream or sys.stderr
        self._enabled = enabled
        self._bar = None
        self._last_line = None
        if enabled and self._isatty():
            try:
                import tqdm  # optional dependency
                self._tqdm = tqdm.tqdm
            except ImportError:
                self._tqdm = None
        else:
            self._tqdm = None

    def _isatty(self) -> bool:
        try:
            return self._stream.isatty()
        except (AttributeError, ValueError):
            return False

    @property
    def uses_bar(self) -> bool:
        return self._tqdm is not None

    def update(self, job):
        if not self._enabled:
            return
        point = job.latest_metrics if job.HasField("latest_metrics") else None
        if self._tqdm is not None:
            self._update_bar(job, point)
            return
        line = " ".join(t for t in (_status_text(job), metrics_text(point)) if t)
        if line != self._last_line:
            self._stream.write(line + "\n")
            self._stream.flush()
            self._last_line = line

    def _update_bar(self, job, point):
        if self._bar is None:
            self._bar = self._tqdm(total=None, file=self._stream, unit="step", dynamic_ncols=True)
        self._bar.set_description(_status_text(job), refresh=False)
        if point is not None and point.step > 0:
            if point.total_steps and self._bar.total != point.total_steps:
                self._bar.total = point.total_steps
            postfix = {"loss": "%.4f" % point.loss}
            if point.HasField("eval_loss"):
                postfix["eval"] = "%.4f" % point.eval_loss
            if point.tokens_per_second > 0:
                postfix["tok/s"] = "{:,.0f}".format(point.tokens_per_second)
            self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(max(0, point.step - self._bar.n))
        self._bar.refresh()

    def close(self, job=None):
        """Shows the final state (when given) and ends the bar."""
        if job is not None:
            self.update(job)
        if self._bar is not None:
            self._bar.close()
            self._bar = None
