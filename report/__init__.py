"""Report: frames into a data model, the data model into HTML, PDF, CSV and summary.json."""
