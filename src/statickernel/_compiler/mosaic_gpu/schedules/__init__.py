"""The launch schedules as strategies: how a launch's CTAs keep HBM busy. Each proposes
itself for a planned specialization, or declines; `choose.py` asks them in order."""
