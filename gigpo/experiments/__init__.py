"""Experiments over finished runs, for `gigpo compare`: running the comparison and its report (compare.py),
paired statistics over seeds (paired.py), plots (plots.py), and held-out tasks paired run against run
(heldout.py). Training never needs this package, except the loop's own curves (plots.plot_run)."""
