"""The window's look and small shared widgets: the theme, plain-text tooltips and labels, banners."""
