"""``python -m nprof_report`` runs the command-line interface."""

from nprof_report.cli import main

main()
