"""Loads pairs of trace directories (a rank's Kineto traces, and what ncclmerge wrote for them)
with HTA's TraceAnalysis and compares every analysis the pair has: they must be identical (the
merge adds NCCL events beside Kineto's, and HTA must see the Kineto part unchanged).

    python hta_compare.py IN_DIR OUT_DIR [IN_DIR OUT_DIR ...]

Prints one line per analysis: "<in> <analysis> SAME" or "... DIFF <details>", and the pandas
version first. Exits 1 on any difference or failure."""
import logging
import sys
import warnings

logging.disable(logging.WARNING)
warnings.filterwarnings("ignore")

import pandas as pd  # noqa: E402
from hta.trace_analysis import TraceAnalysis  # noqa: E402

ANALYSES = {
    "temporal_breakdown": lambda a: a.get_temporal_breakdown(visualize=False),
    "comm_comp_overlap": lambda a: a.get_comm_comp_overlap(visualize=False),
    "gpu_kernel_breakdown": lambda a: a.get_gpu_kernel_breakdown(visualize=False)[0],
    "gpu_kernels_per_rank": lambda a: a.get_gpu_kernel_breakdown(visualize=False)[1],
    "idle_time_breakdown": lambda a: a.get_idle_time_breakdown(visualize=False)[0],
    "queue_length_summary": lambda a: a.get_queue_length_summary(ranks=list(a.t.traces.keys())),
}

print("pandas", pd.__version__)
failed = False
args = sys.argv[1:]
for din, dout in zip(args[0::2], args[1::2]):
    a, b = TraceAnalysis(trace_dir=din), TraceAnalysis(trace_dir=dout)
    kernels = sum(len(df) for df in a.t.traces.values())
    print(din, "events", kernels, sum(len(df) for df in b.t.traces.values()))
    for name, f in ANALYSES.items():
        try:
            x, y = f(a), f(b)
            pd.testing.assert_frame_equal(x.reset_index(drop=True), y.reset_index(drop=True), check_dtype=False)
            print(din, name, "SAME", len(x))
        except AssertionError as e:
            failed = True
            print(din, name, "DIFF", str(e).replace("\n", " ")[:400])
        except Exception as e:  # HTA itself failing on one of them
            failed = True
            print(din, name, "FAILED", type(e).__name__, str(e)[:300])
sys.exit(1 if failed else 0)
