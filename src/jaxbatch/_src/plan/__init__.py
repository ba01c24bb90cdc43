"""Planning: planner options (the engine's) and batch plans."""
