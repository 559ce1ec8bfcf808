"""`python -m tui.cli` runs the command line (tests use it; users have `autoresearch`)."""

from tui.cli import main

main(prog_name="autoresearch")
