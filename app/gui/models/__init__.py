"""Choosing what answers: the model bar, the first-run panel, the model manager, remote servers."""
