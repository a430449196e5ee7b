"""The PySide6 desktop window. Nothing here touches llama-cpp-python: the worker drives app.core.

Layers, lowest first; a module imports only from its own package and from lower layers
(tests/core/test_layers.py holds this):

0. widgets/: the look (theme), plain-text helpers, banners;
1. runtime/: the engine's thread (worker), the conversation controller, what a chat shows of an
   answer's statistics (chat_values, live_stats);
2. chat/: the conversation list, messages and composer; panels/: statistics, charts, settings and
   the server; models/: the model bar, the first-run panel, the model manager, remote servers;
3. app.py, main_window.py, smoke.py: the window built and wired, the application, the self-test.
"""
