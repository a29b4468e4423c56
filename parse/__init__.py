"""Parse: trace files and Neuron profile trees into Polars frames with declared schemas (never imports torch)."""
