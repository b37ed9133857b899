"""``python -m streamdedup``: the same command line as ``streamdedup``."""

from streamdedup.cli.main import main

if __name__ == "__main__":
    main()
