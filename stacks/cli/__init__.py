"""trainctl: main.py builds the typer app, each command (group) module `register(app)`s itself; commands parse
their options, call stacks/runs, targets/ or gcp/ for the work, and render (report.py: tables; run_view.py and
multi_view.py: a run as it goes); common.py maps exceptions to one line and an exit status."""
