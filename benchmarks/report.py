"""What several benchmark scripts print: rows of figures as a markdown table."""

from __future__ import annotations


def print_markdown(rows: list[dict]) -> None:
    """`rows` as a markdown table, the first row's keys as the columns."""
    columns = list(rows[0])
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    for row in rows:
        print("| " + " | ".join(str(row[c]) for c in columns) + " |")
