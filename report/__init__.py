"""`harness report`: across-seed statistics of a sweep (GUIDE §5), as Markdown, HTML, JSON and LaTeX."""
