"""What workers print: routed with backpressure, printed on the terminal, selected by node, captured with a value."""
