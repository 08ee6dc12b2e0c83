"""`harness report`: across-seed statistics of a sweep, as Markdown, HTML, JSON and LaTeX."""
