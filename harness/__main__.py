"""``python -m diageval``: the same command line as the ``diageval`` script."""

from diageval.cli import main

if __name__ == "__main__":
    main(prog_name="diageval")
