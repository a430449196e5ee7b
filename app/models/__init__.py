"""Models: Hugging Face search and resumable downloads, the local registry, memory estimates, pairing.

Nothing here imports Qt: the dialog (app/gui/models/manager/) and the CLI (app/models/cli.py) are
two faces of the same functions.
"""
