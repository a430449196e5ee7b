"""The ``quickdraft`` command line, on the same engine as the window and the server: the commands
and their parser (commands.py), model flags into a loaded engine (model_args.py), thinking models'
flags and output (thinking.py), ``quickdraft info`` (info.py) and the speed benchmark (bench.py).
``quickdraft serve`` and ``quickdraft models`` add their parsers from app/server/cli.py and
app/models/cli.py. ``main`` is the one way in: the console script (``app.cli:main``), the frozen
launcher and ``python -m app.cli`` (__main__.py) all call it."""


def main(argv: list[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: the process's); the exit status. The parser and
    the commands are imported only now, so importing the package costs nothing."""
    from app.cli.commands import main as run

    return run(argv)
