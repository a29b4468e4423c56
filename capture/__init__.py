"""Capture: runs a workload under torch.profiler and writes a run folder of profile bundles."""
