"""Exports: a trace (any source, through the trace model) written in another tool's format.

- ``perfetto``: Chrome trace-event JSON (``.json`` / ``.json.gz``), which Perfetto,
  chrome://tracing, HTA and profkit's own Kineto reader open (``export_perfetto``);
- ``chrome_events``: model columns -> serialised events, a chunk of rows at a time;
- ``tracks``: which track each event goes on, the window cut, flows, steps;
- ``lanes``: slices split into lanes that nest; ``sink``: atomic, streamed (gzip) output.
"""
