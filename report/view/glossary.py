"""The report's glossary: what each figure and term in the report means.

Data, not code: :mod:`.model` places it at the end of the report (a sweep adds its own terms,
:mod:`.sweepview`).
"""

from __future__ import annotations

GLOSSARY: list[tuple[str, str]] = [
    (
        "Step time",
        "Duration of one ProfilerStep#N annotation: the implementation's call, the device synchronisation and prof.step(). Median and interquartile range (IQR, p25–p75) over the active steps. In a trace without ProfilerStep#N, of one iteration as the step rule finds it.",
    ),
    (
        "Step rule",
        "What a step is, per trace (step_rule in summary.json, and each section's description): ProfilerStep (the ProfilerStep#N annotations of the profiler's schedule); annotation:NAME (without them, the instances of the user annotation NAME that repeats at the top of the thread that dispatches the ops, looking through annotations that occur once; PyTorch's own such as Optimizer.step#… are never picked; --step-annotation NAME picks one by hand); window (otherwise the whole profiled window, from the first event to the end of the last, is one step). Every per-step figure, comparison, diff, check and the cross-rank section work on these steps; where a side has one step there is no spread, and the report says 'one step: no spread' instead of a noise verdict.",
    ),
    (
        "Framework ops per step",
        "Top-level cpu_op events in a step: ops with no op around them, i.e. what the Python code dispatched. Nested aten calls are not counted again.",
    ),
    (
        "Host dispatch",
        "Summed duration of the top-level framework ops of a step: host time spent inside the framework. Per op: divided by the framework ops per step.",
    ),
    (
        "Framework self time",
        "Summed self CPU time of every op in a step (its own time, excluding nested ops and runtime calls).",
    ),
    (
        "Runtime calls",
        "Host-side calls into the device runtime or driver (cuda_runtime, privateuse1_runtime, privateuse1_driver …) and their summed duration.",
    ),
    (
        "Device time",
        "Summed duration of device activities (kernels, copies, syncs) launched from the step, linked to their op by External id, correlation id or ac2g flow.",
    ),
    ("Device busy %", "Device time per step divided by the median step time."),
    (
        "Un-profiled time",
        "Median wall time of one call plus synchronisation measured with torch.utils.benchmark, without the profiler.",
    ),
    (
        "Profiler overhead",
        "Median profiled step time minus the median un-profiled call time (absolute and relative to the un-profiled time).",
    ),
    (
        "Exceeds noise",
        "A difference exceeds the run-to-run noise when the interquartile ranges of the two step-time samples do not overlap (un-profiled: when the difference is larger than the sum of the two half-IQRs).",
    ),
    (
        "Host breakdown of the median step",
        "Each instant of the step, on the thread that dispatched its ops, goes to exactly one part, that of the innermost event running then (the one started last), so the parts are never negative and add up to the step whatever overlaps the trace holds: framework dispatch (ops, nested annotations, Python frames), runtime calls made by ops (launches: nested in an op or linked to it), waiting on the device (runtime calls no op made: the loop's synchronize), and outside ops (no event: Python between ops, prof.step()). Where events nest properly, each part is the sum of their self times.",
    ),
    (
        "Launch → device start",
        "Median time from the start of a runtime call to the start of the device activity it launched (linked by correlation id or ac2g flow). On Neuron: submit (nrt_model_submit) to nc_exec_running start.",
    ),
    (
        "Device idle gap and cause",
        "A hole between merged device-busy intervals inside a step. Its cause is the host activity that overlaps it most: host dispatch (a framework op), runtime call, synchronization (a runtime call outside ops), transfer (the gap ends at a copy), compilation or loading (a Neuron load overlaps it), host outside ops.",
    ),
    (
        "Neuron figures",
        "From the Neuron system trace: NEFF submissions (nrt_model_submit), hardware executions (nc_exec_running, one span per execution merged across physical cores), model switches, copies in/out (dmem_buf_copyin/out), host blocked on the device (kbl_exec_wait), device busy and idle per step; engine active %, MFU and MBU estimates from the device profiles' Summary tables.",
    ),
    (
        "Self CPU / CPU total / Self device / Device total",
        "As in prof.key_averages(): self = own time minus children's; device total = device time of the op and everything it called; an op nested in an op of the same name with no sibling counts once.",
    ),
]
