"""The light theme: colours shared by the style sheet, the rendered messages and the charts."""

from __future__ import annotations

WINDOW_BG = "#f5f6f8"
PANEL_BG = "#ffffff"
BORDER = "#dde1e6"
TEXT = "#1f2328"
MUTED = "#6a737d"
DISABLED = "#a0a7b0"    # text that cannot be clicked: greyed, or it looks clickable
ACCENT = "#2f6feb"
ACCENT_DARK = "#1f57c3"
USER_BG = "#eef3fd"
ASSISTANT_BG = "#ffffff"
CODE_BG = "#f6f8fa"
ERROR_BG = "#fdecea"
ERROR_FG = "#a4161a"
WARN_BG = "#fff6dc"
INFO_BG = "#e8f4ec"
DRAFT_BG = "#c9f0d6"     # an accepted draft token
SUFFIX_BG = "#f3e2b8"    # an accepted token drafted from the suffix index (past answers and prompts)
MAIN_BG = "#dbe7fb"      # a token the main model produced itself
DRAFT_LINE = "#1a7f37"
MAIN_LINE = "#2f6feb"
ROLLING_LINE = "#bf8700"
MONO = "'DejaVu Sans Mono', 'Menlo', 'Consolas', monospace"

STYLE_SHEET = f"""
QMainWindow, QWidget#central {{ background: {WINDOW_BG}; }}
QWidget {{ color: {TEXT}; font-size: 10pt; }}
QWidget:disabled, QAbstractItemView::item:disabled {{ color: {DISABLED}; }}
QFrame#panel, QWidget#panel {{ background: {PANEL_BG}; border: 1px solid {BORDER}; border-radius: 8px; }}
QFrame#modelBar {{ background: {PANEL_BG}; border-bottom: 1px solid {BORDER}; }}
QLabel#sectionTitle {{ font-weight: 600; color: {MUTED}; font-size: 9pt; }}
QLabel#statValue {{ font-size: 13pt; font-weight: 600; }}
QLabel#statName {{ color: {MUTED}; font-size: 8pt; }}
QLabel#footer {{ color: {MUTED}; font-size: 8pt; }}
QLabel#role {{ font-weight: 600; color: {MUTED}; }}
QLabel#status {{ color: {MUTED}; }}
QFrame#userMessage {{ background: {USER_BG}; border: 1px solid {BORDER}; border-radius: 10px; }}
QFrame#assistantMessage {{ background: {ASSISTANT_BG}; border: 1px solid {BORDER}; border-radius: 10px; }}
QFrame#banner[kind="error"] {{ background: {ERROR_BG}; border: 1px solid #f3b8b4; border-radius: 6px; }}
QFrame#banner[kind="warning"] {{ background: {WARN_BG}; border: 1px solid #f0d58a; border-radius: 6px; }}
QFrame#banner[kind="info"] {{ background: {INFO_BG}; border: 1px solid #a8dbb7; border-radius: 6px; }}
QTextBrowser#messageBody {{ background: transparent; border: none; }}
QTextBrowser#reasoningBody {{ background: {CODE_BG}; border: none; border-left: 3px solid {BORDER};
    color: {MUTED}; }}
QToolButton#reasoningToggle {{ border: none; color: {MUTED}; padding: 2px 0px; font-style: italic; }}
QToolButton#reasoningToggle:hover {{ color: {ACCENT}; }}
QPlainTextEdit, QLineEdit {{
    background: {PANEL_BG}; border: 1px solid {BORDER}; border-radius: 6px; padding: 4px 6px; }}
QComboBox, QSpinBox, QDoubleSpinBox {{ min-height: 22px; }}
QPlainTextEdit:focus, QLineEdit:focus {{ border: 1px solid {ACCENT}; }}
QPushButton {{ background: {PANEL_BG}; border: 1px solid {BORDER}; border-radius: 6px; padding: 5px 12px; }}
QPushButton:hover {{ border-color: {ACCENT}; }}
QPushButton:disabled {{ color: {DISABLED}; background: #f0f1f3; }}
QPushButton#primary {{ background: {ACCENT}; color: white; border: 1px solid {ACCENT_DARK}; font-weight: 600; }}
QPushButton#primary:hover {{ background: {ACCENT_DARK}; }}
QPushButton#primary:disabled {{ background: #9db8f0; color: #eef3fd; }}
QPushButton#danger {{ color: {ERROR_FG}; }}
QPushButton#danger:disabled {{ color: {DISABLED}; }}
QToolButton#link {{ border: none; color: {ACCENT}; padding: 2px 4px; }}
QToolButton#link:hover {{ text-decoration: underline; }}
QListWidget {{ background: {PANEL_BG}; border: 1px solid {BORDER}; border-radius: 6px; padding: 4px; }}
QListWidget::item {{ padding: 6px 6px; border-radius: 4px; }}
QListWidget::item:selected {{ background: {USER_BG}; color: {TEXT}; }}
QTabWidget::pane {{ border: 1px solid {BORDER}; border-radius: 6px; background: {PANEL_BG}; top: -1px; }}
QTabBar::tab {{ padding: 6px 14px; border: 1px solid transparent; }}
QTabBar::tab:selected {{ background: {PANEL_BG}; border: 1px solid {BORDER}; border-bottom-color: {PANEL_BG};
    border-top-left-radius: 6px; border-top-right-radius: 6px; }}
QScrollArea {{ border: none; background: transparent; }}
QProgressBar {{ border: 1px solid {BORDER}; border-radius: 4px; background: {PANEL_BG}; max-height: 8px; }}
QProgressBar::chunk {{ background: {ACCENT}; }}
"""
