"""What the commands print and write for people: text tables (`reports.text`), the comparison and
the cost plan as text (`reports.compare`, `reports.plan`), what `show --json` and the report gather
(`reports.data`), and the self-contained HTML report (`reports.html`) with its SVG charts
(`reports.charts`, the only module that imports Matplotlib: the `report` extra). No Beam here: the
commands read results back through `pipelines.results`."""
