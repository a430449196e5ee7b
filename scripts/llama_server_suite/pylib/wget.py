"""The suite's utils.py imports wget to download models; the shim serves local files, so nothing is
downloaded: a call means a test wanted a file the shim does not provide."""


def download(url, out=None, bar=None):
    raise RuntimeError(f"the llama-server shim downloads nothing (asked for {url})")
