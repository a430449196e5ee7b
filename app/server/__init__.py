"""An OpenAI-compatible HTTP server on the loaded pair: one more client of the Engine, like the GUI.

api.py checks request bodies, worker.py owns the engine on one thread and runs one generation at a
time, responses.py shapes answers and timings, metrics.py renders /metrics, app.py routes HTTP and
run.py binds and serves.
"""
