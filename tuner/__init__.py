"""akg.tuner: features, cost models, search, measurement and task scheduling."""
