"""`python -m cli ...` runs the same as `scape ...`."""

from cli import main

if __name__ == "__main__":
    main()
