"""The model manager: installed models, draft pairing, Hugging Face downloads, recommended pairs.

Opened from the chat window (``ModelManagerDialog(paths, parent)``; ``pair_chosen(main, draft_or_"")``
sets the pair there) or on its own. Downloads and hub requests are asyncio tasks on the Qt event loop
through qasync (``session.ManagerSession``); their blocking parts run in worker threads, so the window
never freezes. One module per tab; ``dialog`` assembles them.
"""

from app.gui.models.manager.dialog import ModelManagerDialog
from app.gui.models.manager.session import ManagerSession, qt_event_loop

__all__ = ["ManagerSession", "ModelManagerDialog", "qt_event_loop"]
