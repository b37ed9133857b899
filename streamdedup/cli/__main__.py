"""``python -m streamdedup.cli``: the same as the ``streamdedup`` command."""

from streamdedup.cli.main import main

if __name__ == "__main__":
    main()
