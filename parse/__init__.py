"""Parse: trace files and Neuron profile trees into frames with declared schemas (:mod:`.schema`);
never imports torch.

The door for report/, capture/ and the CLI: they import the names below from here, never a module
inside (a test checks it). Two wings sit behind it:

* :mod:`.read` -- a trace file into rows (:func:`~.read.read`): the reference loader, the
  streaming loader and its pieces, Polars' JSON readers, the split workers;
* :mod:`.derive` -- rows into ops, device activities, steps and links (:mod:`.nesting` nests,
  :mod:`.parts` takes the rows apart, :mod:`.classify` names the classes), imports no reader;

and :mod:`.neuron`, the Neuron profile's own reader and link chain. Around them: :mod:`.inputs`
(what the user passed, as sources), :mod:`.frames` (read, then derive), :mod:`.cache`,
:mod:`.sources` (a source's frames and Neuron device time), :mod:`.parallel` (several traces at
once) and :mod:`.keyavg` (``key_averages()`` offline).

Names are imported when first used, so that the CLI can start the decode workers
(:func:`prestart`) before Polars is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nprof_report.lazy import lazy_getattr

if TYPE_CHECKING:
    from nprof_report.parse.engine_ray import run_on_ray
    from nprof_report.parse.fingerprint import fingerprint_path, inspect_and_fingerprint
    from nprof_report.parse.frames import load_frames
    from nprof_report.parse.inputs import Inputs, Source, newest_run, resolve
    from nprof_report.parse.inspection import Inspection, inspect_path
    from nprof_report.parse.keyavg import key_averages
    from nprof_report.parse.nesting import rows_of
    from nprof_report.parse.neuron import NeuronFigures
    from nprof_report.parse.neuron.convert import convert_tree, find_tool
    from nprof_report.parse.parallel import load_sources, prepare_sources
    from nprof_report.parse.read import prestart
    from nprof_report.parse.schema import TraceFrames, TraceMeta
    from nprof_report.parse.sources import LoadedSource, load_source, neuron_root

__all__ = [
    "Inputs",
    "Inspection",
    "LoadedSource",
    "NeuronFigures",
    "Source",
    "TraceFrames",
    "TraceMeta",
    "convert_tree",
    "find_tool",
    "fingerprint_path",
    "inspect_and_fingerprint",
    "inspect_path",
    "key_averages",
    "load_frames",
    "load_source",
    "load_sources",
    "neuron_root",
    "newest_run",
    "prepare_sources",
    "prestart",
    "resolve",
    "rows_of",
    "run_on_ray",
]

# where each name lives (relative to this package)
_HOME = {
    "Inputs": "inputs",
    "Inspection": "inspection",
    "LoadedSource": "sources",
    "NeuronFigures": "neuron",
    "Source": "inputs",
    "TraceFrames": "schema",
    "TraceMeta": "schema",
    "convert_tree": "neuron.convert",
    "find_tool": "neuron.convert",
    "fingerprint_path": "fingerprint",
    "inspect_and_fingerprint": "fingerprint",
    "inspect_path": "inspection",
    "key_averages": "keyavg",
    "load_frames": "frames",
    "load_source": "sources",
    "rows_of": "nesting",
    "load_sources": "parallel",
    "prepare_sources": "parallel",
    "neuron_root": "sources",
    "newest_run": "inputs",
    "prestart": "read",
    "resolve": "inputs",
    "run_on_ray": "engine_ray",
}

__getattr__ = lazy_getattr(__name__, _HOME)
