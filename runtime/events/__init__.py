"""Event sourcing: the events, the pure reducer, the event log (the one door) and the timeline drawn from it."""
