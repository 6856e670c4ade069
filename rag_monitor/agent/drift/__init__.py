"""The drift plane: what the agent runs around the statistics of ``rag_monitor.detectors``.

- ``feed.py``: ``DriftFeed`` samples assembled queries into the store's reservoirs (embedding
  them when the app sent no vectors), off the request path;
- ``runs.py``: one scheduled run per profile and slot across replicas (claims the slot in the
  store, tests the window, records the result);
- ``export.py``: a profile's latest run to the Prometheus gauges, at scrape time;
- ``report.py``: ``rag-monitor drift report`` (HTML, with Evidently's pages when installed).
- ``profiles.py``: reads the profiles file (setting ``detector_profiles``);
- ``reference_admin.py``: ``rag-monitor drift reference show|set`` on the store.

The statistics themselves (the tests, the page rule, reservoir sampling, hour matching) take
arrays and plain values and do no I/O; this package reads and writes the store, keeps the clock
and the threads.
"""
