"""One module per dtbench suite: its report section, plots, metrics and parameters (see registry.py)."""
