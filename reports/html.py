"""HTML reports from jinja2 templates (reports/templates/), every value autoescaped: names,
captions and table cells are text, never markup. Images are embedded, so a page is one file."""

from __future__ import annotations

import base64
import math
from pathlib import Path

import pandas as pd

TEMPLATES = Path(__file__).parent / "templates"


def render_html(template: str, **values) -> str:
    from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

    env = Environment(loader=FileSystemLoader(TEMPLATES),
                      autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined)
    return env.get_template(template).render(**values)


def table(df: pd.DataFrame, floatfmt: str = "{:.3f}") -> dict:
    """{"columns": [...], "rows": [[cell text, ...], ...]} with floats formatted and missing
    values empty, as the Markdown tables show them."""
    def cell(v) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return ""
        return floatfmt.format(v) if isinstance(v, float) else str(v)

    return {"columns": [str(c) for c in df.columns],
            "rows": [[cell(v) for v in row] for row in df.itertuples(index=False)]}


def png_b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()
