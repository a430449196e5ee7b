"""The PySide6 desktop window. Nothing here touches llama-cpp-python: the worker drives app.core."""
