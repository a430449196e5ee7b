"""An OpenAI- and llama-server-compatible HTTP server on the loaded pair: one more client of the
Engine, like the GUI.

api.py checks OpenAI request bodies, fields.py llama-server's extra fields (and refuses those it cannot
honour), native_api.py llama-server's own bodies; worker.py owns the engine on one thread and runs one
job at a time (a generation, or an engine call such as /tokenize), infill.py builds /infill's prompt;
responses.py and answers.py shape OpenAI answers and timings, native_responses.py llama-server's;
metrics.py renders /metrics; app.py and native_routes.py route HTTP (slot_files.py: a slot's cache
saved to a file, restored, erased), access.py answers CORS and checks the API key, and run.py binds
and serves.
"""
