"""The reports' numbers and markdown tables. A value not measured (None) prints as a dash."""


def fmt(value, digits=2):
    return "–" if value is None else f"{value:.{digits}f}"


def pct(value):
    return "–" if value is None else f"{100 * value:.0f}%"


def num(value):
    return "–" if value is None else f"{value:,.0f}".replace(",", " ")


def table(header, rows):
    """A markdown table (the first column left-aligned, the rest right) and the blank line after it."""
    return (["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
            + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows] + [""])
