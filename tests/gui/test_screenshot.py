"""Render the window mid-conversation to test-artifacts/main_window.png for a person to look at."""

from __future__ import annotations

from PySide6.QtGui import QImage

from tests.gui.conftest import ARTIFACTS, wait_answering, wait_idle, wait_loaded

EARLIER_ANSWER = """To reverse a list **in place**, call `reverse()`; to get a reversed copy, slice it:

```python
numbers = [1, 2, 3, 4]
numbers.reverse()          # numbers is now [4, 3, 2, 1]
backwards = numbers[::-1]  # a new list: [1, 2, 3, 4]
```

`reversed(numbers)` gives an iterator when you only need to loop once.
"""
EARLIER_STATS = {"generation_tps": 42.1, "generated_tokens": 118, "drafted": 96, "accepted": 71,
                 "stop_reason": "eog", "speedup": 1.9}


def test_main_window_screenshot(make_window, gui_models, qtbot):
    window = make_window(main_model=str(gui_models.main), draft_model=str(gui_models.same), max_tokens=1000)
    wait_loaded(qtbot, window)
    conv = window.controller.store.create("Reversing lists in Python", "You are terse.")
    window.controller.store.add_message(conv.id, "user", "How do I reverse a list in Python?")
    window.controller.store.add_message(conv.id, "assistant", EARLIER_ANSWER, EARLIER_STATS)
    window.controller.store.create("Explain speculative decoding", "")
    window.controller.select_conversation(conv.id)

    window.controller.send_message("write a long story")
    wait_answering(qtbot, window, rounds=40)
    qtbot.wait(2 * 150)  # two repaint ticks, so counters and charts show this data
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / "main_window.png"
    assert window.grab().save(str(path))
    wait_idle(qtbot, window)
    window.controller.set_colour_tokens(True)
    qtbot.wait(50)
    assert window.grab().save(str(ARTIFACTS / "main_window_tokens.png"))

    image = QImage(str(path))
    assert (image.width(), image.height()) == (window.width(), window.height())
    colours = {image.pixel(x, y) for x in range(0, image.width(), 7) for y in range(0, image.height(), 7)}
    assert len(colours) > 50, "the window rendered as more than a blank surface"
