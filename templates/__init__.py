"""Jinja2 templates and CSS of the report (loaded with PackageLoader)."""
