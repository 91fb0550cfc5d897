"""Host: where does the CPU time of a step go, and which Python code runs while the GPU waits?

``host_time(trace) -> HostResult``.  Definitions (ns, the trace's clock), over
the steady-state steps of ``profkit.analysis.steps.find_steps``:

- **GPU idle**: a step's window minus the union of all GPU work
  (``schema.GPU_WORK_TABLES``: kernels, copies, sets, graph replays), so that
  per step it equals the step's ``duration_ns - gpu_busy_ns``.
- The **main thread** holds the step ranges; in a trace without them, it is the
  Python thread (one with frames) that launches the most GPU work.  The
  autograd engine's thread launches most kernels in training but runs no
  Python, which is why "the thread that launched most" is asked of Python
  threads only.
- Each instant counts for the **innermost Python frame** open at that instant
  (``schema.PYTHON_FRAMES``; under torch.profiler a built-in is a frame named with
  its caller, "sleep (built-in) called from train_step", under nsys's sampler it
  counts for its caller): its **self** time.  **Inclusive** time is the time a
  function was anywhere on the stack (a recursive function counts once).  Both
  are measured over the steps' **host windows** (``attribution.host_windows``:
  from a step range's start on the CPU to the next one's), since a GPU-bound
  program's host runs ahead of its GPU; where a step has no host range, over
  the GPU windows.
- **gpu_idle** is the GPU idle (in the steps' GPU windows) during which the
  function was innermost, leaving out idle with work already launched and not
  yet started (``timeline.queued``: no host code held the GPU up then;
  ``gpu_idle_queued_ns_per_step``).  Figures are totals over the steady-state
  steps divided by their number.
- A function is (function, file); its ``line`` is, for Kineto, the function's
  first line, for nsys the sampled line where it spent the most self time.
- **explained_idle_pct**: the share of the steady state's GPU idle time with
  nothing queued that falls in a main-thread Python frame (nsys: covered by a
  sample).
- Other threads' frames are attributed the same way and listed apart.
- profkit's own frames (its launcher, its sync hook: any file of the package,
  ``own_frames``) are transparent: their time goes to the caller's frame.
- ``step_median_ns`` is the steady median of ``find_steps``, whatever steps
  the rows cover: one step median everywhere.

The figures come from ``attribution``; what they mean for a step (the verdict)
from ``verdict``; which frames load data from ``data_loading``.
"""

from profkit.analysis.host.attribution import HostResult, host_time

__all__ = ["HostResult", "host_time"]
