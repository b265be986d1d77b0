"""`python -m cli ...` runs the same as `scape ...`."""

from cli import app

if __name__ == "__main__":
    app()
