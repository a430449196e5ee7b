"""A server slot's cache saved to a file, restored from one, or erased (llama-server's
``POST /slots/{id}?action=save|restore|erase``): the local Engine's part, mixed into it.

What is saved is the main model's sequence, in llama.cpp's own file (llama/seq_file.py), so a slot
of one server restores what another saved. The drafting side needs nothing from the file: a draft
model's cache is matched against the tokens each time it drafts and reads on from what it shares
with them, so after a restore it catches up on the restored tokens (or drops its own) by itself. A
head (MTP, EAGLE-3, DFlash) is the exception: it reads the main model's hidden state at every
position, which no file holds, so a slot that drafts with one is not restored (SlotFileError).
"""

from __future__ import annotations

from pathlib import Path

from app.core.errors import SlotFileError
from app.core.llama import seq_file


class SlotFiles:
    """Engine's slot file actions (on the engine's thread, as every use of its contexts)."""

    def save_slot(self, path: Path) -> tuple[int, int]:
        """Write the main model's cache to ``path``: (tokens saved, bytes written)."""
        return len(self.main.cached), seq_file.save(self.main, path)

    def restore_slot(self, path: Path) -> tuple[int, int]:
        """Make the cache saved at ``path`` the main model's: (tokens restored, bytes read)."""
        if self._heads:
            raise SlotFileError("this slot drafts with a head, which needs the main model's hidden state at every "
                                "position: a slot file holds none")
        tokens, read = seq_file.restore(self.main, path)
        return len(tokens), read

    def erase_slot(self) -> int:
        """Empty the slot's caches, the draft's too, so its next prompt is read whole: the tokens it held."""
        held = len(self.main.cached)
        self.forget_cache()
        return held
