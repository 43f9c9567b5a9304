"""Running the command line in a test: `statetrack.cli.main` with its exit code and captured output."""

from statetrack.cli import main


def run_cli(capsys, *argv):
    """(exit code, stdout, stderr) of `statetrack *argv`; argparse usage errors give their exit code."""
    try:
        code = main(list(argv))
    except SystemExit as exit:
        code = exit.code
    out, err = capsys.readouterr()
    return code, out, err
